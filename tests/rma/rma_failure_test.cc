// Failures an RMA group must survive: a rank killed mid-run (its peers' requests to it fail with
// ncclRemoteError within the peer-check bound, queryLastError says so, and the others go on
// among themselves), and a close with operations in flight, after which the plugin touches none
// of the windows' memory (it is unmapped at once: any later access would crash the rank).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rma_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

TEST(RmaFailure, AKilledRankFailsItsRequestsAndTheOthersGoOn) {
  ScopedEnv env;
  env.set("NCCL_FABRIC_PEER_CHECK_MS", "100");
  constexpr int kVictim = 2;
  runRanks(3,
           [](RankPeer& peer) {
             Rma rma;
             bool skip = false;
             ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
             ASSERT_FALSE(skip);
             ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
             const size_t block = 64 << 10;
             HostBuffer out(block), in(block * 3);
             std::vector<uint64_t> signals(3, 0);
             void *outMh, *inMh, *sigMh;
             ASSERT_NO_FATAL_FAILURE(regWindow(rma, out.data(), block, abi::kPtrHost, 0, &outMh));
             ASSERT_NO_FATAL_FAILURE(regWindow(rma, in.data(), block * 3, abi::kPtrHost, 0, &inMh));
             ASSERT_NO_FATAL_FAILURE(regWindow(rma, signals.data(), 24, abi::kPtrHost, 0, &sigMh));
             ASSERT_TRUE(peer.barrier());
             if (peer.rank == kVictim) {
               // Mid-run: puts of its own in flight toward the others.
               void* request = nullptr;
               for (int dst = 0; dst < 2; ++dst) {
                 rma.table->iput(rma.ctx, 0, 0, outMh, block, 0, inMh, dst, 0, &request);
               }
               raise(SIGKILL);
             }
             // The survivors keep putting into the victim until its requests fail.
             int failedAt = -1;
             Deadline deadline(60);
             for (int i = 0; failedAt < 0; ++i) {
               ASSERT_FALSE(deadline.expired()) << "requests to the killed rank never failed";
               void* request = nullptr;
               abi::Result result =
                   rma.table->iputSignal(rma.ctx, 0, 0, outMh, block, 0, inMh, kVictim,
                                         static_cast<uint64_t>(peer.rank) * 8, sigMh, 1,
                                         abi::kSignalOpInc, true, 0, &request);
               if (result == abi::kSuccess) result = pollRma(rma, request, 60);
               if (result != abi::kSuccess) {
                 EXPECT_EQ(result, abi::kRemoteError);
                 failedAt = i;
               }
             }
             bool failed = false;
             ASSERT_EQ(rma.table->queryLastError(rma.ctx, &failed), abi::kSuccess);
             EXPECT_TRUE(failed) << "queryLastError must report the dead rank";
             void* request = nullptr;
             EXPECT_EQ(rma.table->iput(rma.ctx, 0, 0, outMh, 64, 0, inMh, kVictim, 0, &request),
                       abi::kRemoteError)
                 << "a rank known dead fails at once";
             // The two survivors still move data between them, signals after data. On shm only what
             // the provider never answers for still completes: a write larger than its inject size
             // waits for the target's response, and shm takes responses in order, so the survivor's
             // write that the dead rank never answered holds back every later one of the endpoint.
             // A put small enough to travel in its signal entry is injected and needs no response.
             const int other = 1 - peer.rank;
             const size_t size = testProvider() == "shm" ? 64 : block;
             fillPattern(out.data(), size, 700 + peer.rank);
             ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, outMh, size,
                                             static_cast<size_t>(peer.rank) * block, inMh, other,
                                             static_cast<uint64_t>(peer.rank) * 8, sigMh, 1,
                                             abi::kSignalOpInc, true, 0, &request),
                       abi::kSuccess);
             ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
             ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signals[other], 1));
             EXPECT_TRUE(
                 verifyPattern(in.data() + static_cast<size_t>(other) * block, size, 700 + other));
             ASSERT_TRUE(peer.links[static_cast<size_t>(other)]->signal());
             ASSERT_TRUE(peer.links[static_cast<size_t>(other)]->wait());
             // Closing with the dead rank's writes never accounted for ends at once (it is dead).
             EXPECT_EQ(rma.table->destroyContext(rma.ctx), abi::kSuccess);
             EXPECT_EQ(rma.table->closeColl(rma.coll), abi::kSuccess);
             EXPECT_EQ(rma.table->finalize(rma.instance), abi::kSuccess);
           },
           180, {kVictim});
}

// Memory the test maps itself, so that it can take it away the moment closeColl returns.
class Mapped {
 public:
  explicit Mapped(size_t size) : size_(size) {
    data_ = static_cast<uint8_t*>(
        mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(data_, MAP_FAILED);
  }
  ~Mapped() { unmap(); }
  void unmap() {
    if (data_ != nullptr && data_ != MAP_FAILED) munmap(data_, size_);
    data_ = nullptr;
  }
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_;
  size_t size_;
};

class CloseInFlight : public ::testing::TestWithParam<int> {};

TEST_P(CloseInFlight, TheWindowsAreUnmappedTheMomentCloseCollReturns) {
  runRanks(
      GetParam(),
      [](RankPeer& peer) {
        Rma rma;
        bool skip = false;
        ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
        ASSERT_FALSE(skip);
        ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
        const int n = peer.nranks;
        const size_t block = 4 << 20;
        Mapped out(block), in(block * n), sig(4096);
        void *outMh, *inMh, *sigMh;
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, out.data(), block, abi::kPtrHost, 0, &outMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, in.data(), block * n, abi::kPtrHost, 0, &inMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, sig.data(), 4096, abi::kPtrHost, 0, &sigMh));
        fillPattern(out.data(), block, 55);
        // Large puts, signals and gets to everyone, none of them tested: closeColl finds them all
        // in flight.
        for (int i = 0; i < 8; ++i) {
          for (int dst = 0; dst < n; ++dst) {
            void* request = nullptr;
            ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, outMh, block,
                                            static_cast<size_t>(peer.rank) * block, inMh, dst,
                                            static_cast<uint64_t>(peer.rank) * 8, sigMh, 1,
                                            abi::kSignalOpInc, i % 2 == 0, 0, &request),
                      abi::kSuccess);
            ASSERT_EQ(rma.table->iget(rma.ctx, 0, static_cast<size_t>(dst) * block, inMh, 65536, 0,
                                      outMh, dst, 0, &request),
                      abi::kSuccess);
          }
        }
        ASSERT_EQ(rma.table->destroyContext(rma.ctx), abi::kSuccess);
        ASSERT_EQ(rma.table->closeColl(rma.coll), abi::kSuccess);
        // NCCL may free the windows now: any access by the plugin or the provider crashes the rank.
        out.unmap();
        in.unmap();
        sig.unmap();
        // The plugin goes on working for a new group after it.
        Rma again = rma;
        again.coll = again.ctx = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectRma(peer, &again));
        HostBuffer buffer(4096);
        std::vector<uint64_t> signal(1, 0);
        void *bufferMh, *signalMh;
        ASSERT_NO_FATAL_FAILURE(regWindow(again, buffer.data(), 4096, abi::kPtrHost, 0, &bufferMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(again, signal.data(), 8, abi::kPtrHost, 0, &signalMh));
        fillPattern(buffer.data(), 1024, 60 + peer.rank);
        void* request = nullptr;
        const int right = (peer.rank + 1) % n;
        const int left = (peer.rank + n - 1) % n;
        ASSERT_EQ(again.table->iputSignal(again.ctx, 0, 0, bufferMh, 1024, 2048, bufferMh, right, 0,
                                          signalMh, 1, abi::kSignalOpInc, true, 0, &request),
                  abi::kSuccess);
        ASSERT_NO_FATAL_FAILURE(waitWord(again, &signal[0], 1));
        EXPECT_TRUE(verifyPattern(buffer.data() + 2048, 1024, 60 + left));
        ASSERT_NO_FATAL_FAILURE(waitRma(again, request));
        ASSERT_TRUE(peer.barrier());
        ASSERT_NO_FATAL_FAILURE(deregWindow(again, bufferMh));
        ASSERT_NO_FATAL_FAILURE(deregWindow(again, signalMh));
        ASSERT_NO_FATAL_FAILURE(closeRma(peer, &again));
      },
      300);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CloseInFlight, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

}  // namespace
}  // namespace nnf::test
