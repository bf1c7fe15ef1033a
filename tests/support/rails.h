// What the multi-rail suites share (tests/functional/multirail_test.cc, failover_test.cc): the
// skip for a one-rail run, and the bytes each rail's NIC carried on the EFA-rules stand-in.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "support/test_env.h"

namespace nnf::test {

// Skips a test with one rail; fails one that asks for rails the stand-in cannot present.
#define REQUIRE_RAILS()                                                                      \
  do {                                                                                       \
    if (::nnf::test::testRails() < 2)                                                        \
      GTEST_SKIP() << "one rail per device: run with NNF_TEST_PROVIDER=efa+rdma+2rails (or " \
                      "NNF_TEST_RAILS=2 on efa) to test multi-rail";                         \
    ASSERT_EQ(::nnf::test::testProvider(), "efa")                                            \
        << "rails need an efa provider (stand-in or soft device: they present the NICs and " \
           "count their traffic)";                                                           \
  } while (0)

// The least share of a transfer's bytes each rail must carry: a quarter of two rails' bytes,
// a fifth of four rails'.
double minRailShare();

// Bytes each rail's domain carried (written by RMA plus sent) in this process so far (the
// EFA-rules stand-in's counts, NNF_EFA_RULES_STATS).
std::map<std::string, uint64_t> carriedByRail();

// Every rail carried at least minRailShare() of `payload` bytes between two snapshots.
::testing::AssertionResult everyRailCarried(const std::map<std::string, uint64_t>& before,
                                            const std::map<std::string, uint64_t>& after,
                                            uint64_t payload);

}  // namespace nnf::test
