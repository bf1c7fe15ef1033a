// Where tests find their inputs.
#pragma once

#include <string>

namespace nnf::test {

// ../shared/fixtures beside the checkout (or NNF_SHARED_FIXTURES), "" when absent: tests that
// need it skip with a message.
std::string sharedFixturesDir();

// The provider the test runs on (NNF_TEST_PROVIDER, else FI_PROVIDER), "" when unset.
std::string testProvider();

// The project's source tree (for its own fixtures under tests/fixtures).
std::string sourceDir();

}  // namespace nnf::test
