// A signal never becomes visible before its data, even when the data takes longer: on the
// EFA-rules stand-in with two NICs, writes on the second NIC are held back 300 ms
// (NNF_EFA_RULES_HOLD_NIC), so a large put's share there lands long after the signal entry on
// the first NIC, as SRD may deliver them. A plugin that applied the signal on the entry's arrival
// would show the old bytes here. (On softefa the device itself delivers in random order; shm and
// tcp deliver a rail in order, which these tests cannot fault.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rma_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

bool heldNicAvailable() {
  return testProvider() == "efa" && !onSoftEfa() && testRails() >= 2;
}

TEST(RmaOrdering, SignalsWaitForDataHeldBackOnAnotherRail) {
  if (!heldNicAvailable()) GTEST_SKIP() << "needs the EFA-rules stand-in with two NICs";
  ScopedEnv env;
  env.set("NNF_EFA_RULES_HOLD_NIC", "1:300");
  runRanks(
      2,
      [](RankPeer& peer) {
        Rma rma;
        bool skip = false;
        ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
        ASSERT_FALSE(skip);
        ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
        const size_t size = 2 << 20;  // striped: half of it goes on the held NIC
        HostBuffer out(size), in(size);
        std::vector<uint64_t> signals(2, 0);
        memset(in.data(), 0, size);
        void *outMh, *inMh, *sigMh;
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, out.data(), size, abi::kPtrHost, 0, &outMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, in.data(), size, abi::kPtrHost, 0, &inMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, signals.data(), 16, abi::kPtrHost, 0, &sigMh));
        const int other = 1 - peer.rank;
        for (int round = 0; round < 3; ++round) {
          // Round 0: a weak signal with its put; 1: a strong one; 2: a plain put, then a strong
          // zero-byte signal, which must wait for the plain put's segments.
          fillPattern(out.data(), size, 500 + round * 2 + peer.rank);
          std::vector<void*> requests(2, nullptr);
          if (round < 2) {
            ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, outMh, size, 0, inMh, other, 0, sigMh, 1,
                                            abi::kSignalOpInc, round == 1, 0, &requests[0]),
                      abi::kSuccess);
          } else {
            ASSERT_EQ(rma.table->iput(rma.ctx, 0, 0, outMh, size, 0, inMh, other, 0, &requests[0]),
                      abi::kSuccess);
            ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, nullptr, 0, 0, nullptr, other, 0, sigMh,
                                            1, abi::kSignalOpInc, true, 0, &requests[1]),
                      abi::kSuccess);
          }
          ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signals[0], round + 1));
          ASSERT_TRUE(verifyPattern(in.data(), size, 500 + round * 2 + other))
              << "round " << round << ": the signal was visible before the held half of its data";
          for (void* request : requests) {
            if (request != nullptr) {
              ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
            }
          }
          ASSERT_TRUE(peer.barrier());
        }
        for (void* mh : {outMh, inMh, sigMh}) ASSERT_NO_FATAL_FAILURE(deregWindow(rma, mh));
        ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
      },
      300);
}

TEST(RmaOrdering, LargePutsUseEveryRail) {
  if (!heldNicAvailable()) GTEST_SKIP() << "needs the EFA-rules stand-in with two NICs";
  runRanks(
      2,
      [](RankPeer& peer) {
        Rma rma;
        bool skip = false;
        ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
        ASSERT_FALSE(skip);
        ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
        const size_t size = 8 << 20;
        HostBuffer out(size), in(size);
        std::vector<uint64_t> signal(1, 0);
        void *outMh, *inMh, *sigMh;
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, out.data(), size, abi::kPtrHost, 0, &outMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, in.data(), size, abi::kPtrHost, 0, &inMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, signal.data(), 8, abi::kPtrHost, 0, &sigMh));
        ASSERT_TRUE(writeEfaRulesStats());
        auto before = readEfaRulesStats(efaRulesStats(), getpid());
        fillPattern(out.data(), size, 900 + peer.rank);
        void* request = nullptr;
        ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, outMh, size, 0, inMh, 1 - peer.rank, 0,
                                        sigMh, 1, abi::kSignalOpInc, true, 0, &request),
                  abi::kSuccess);
        ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
        ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signal[0], 1));
        ASSERT_TRUE(verifyPattern(in.data(), size, 900 + (1 - peer.rank)));
        ASSERT_TRUE(writeEfaRulesStats());
        auto after = readEfaRulesStats(efaRulesStats(), getpid());
        for (int nic = 0; nic < 2; ++nic) {
          std::string domain = efaRulesDomainName(nic);
          uint64_t written = after[domain].written - before[domain].written;
          // Each NIC carries its half of the striped put (the leader also the signal entry).
          EXPECT_GE(written, size / 2) << domain << " carried " << written << " bytes";
        }
        ASSERT_TRUE(peer.barrier());
        for (void* mh : {outMh, inMh, sigMh}) ASSERT_NO_FATAL_FAILURE(deregWindow(rma, mh));
        ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
      },
      300);
}

}  // namespace
}  // namespace nnf::test
