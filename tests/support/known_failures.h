// Tests that fail on the real efa provider (softefa) for a known reason not fixed here: bugs of
// libfabric 2.1's efa provider (fixed in later releases) and defects of the plugin issue 24
// names. The one list is known_failures.cc; a test names itself with NNF_SKIP_KNOWN_FAILURE()
// at its start and is skipped with the reason while its entry is there. Remove the entry when the
// fix lands, and the test runs again. NNF_RUN_KNOWN_FAILURES=1 runs them all the same.
#pragma once

#include <gtest/gtest.h>

namespace nnf::test {

// The reason the running test is known to fail with the provider under test, nullptr when none.
const char* knownFailure();

}  // namespace nnf::test

#define NNF_SKIP_KNOWN_FAILURE()                                              \
  do {                                                                        \
    if (const char* nnf_known_reason = ::nnf::test::knownFailure())           \
      GTEST_SKIP() << "known failure on this provider: " << nnf_known_reason; \
  } while (0)
