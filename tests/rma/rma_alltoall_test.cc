// The shapes NCCL's device API drives through the RMA plugin, on 2, 4 and 8 ranks: MoE dispatch
// (every rank puts a block into every rank's window with a signal, each target waits for each
// source's signal and only then reads the block) and combine's gets, every byte checked. A
// signal applied before its data shows up as the previous round's bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rma_ops.h"

namespace nnf::test {
namespace {

// The bytes source `src` puts into target `dst`'s window in round `round`.
uint64_t blockId(int src, int dst, int round, size_t size) {
  return (uint64_t{static_cast<uint32_t>(src)} << 48) ^ (uint64_t{static_cast<uint32_t>(dst)} << 40) ^
         (uint64_t{static_cast<uint32_t>(round)} << 32) ^ size;
}

class AllToAll : public ::testing::TestWithParam<int> {};

TEST_P(AllToAll, PutWithSignalEachTargetWaitsForItsSignalThenChecksTheData) {
  const int nranks = GetParam();
  runRanks(nranks, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip) << "the device offers no RMA under " << getenv("NNF_TEST_PROVIDER");
    ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
    const int n = peer.nranks;
    // Inline (<= 80 bytes), one write, striped (>= 256 KiB on two rails).
    const std::vector<size_t> sizes = {1, 8, 80, 81, 4096, 65536, 300000};
    const size_t maxSize = 300000;
    HostBuffer out(maxSize * n), in(maxSize * n);
    std::vector<uint64_t> signals(n + 1, 0);
    void *outMh = nullptr, *inMh = nullptr, *sigMh = nullptr;
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, out.data(), out.size(), abi::kPtrHost, 0, &outMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, in.data(), in.size(), abi::kPtrHost, 0, &inMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, signals.data(), signals.size() * sizeof(uint64_t),
                                      abi::kPtrHost, abi::kMrFlagForceStrongOrder, &sigMh));
    std::vector<uint64_t> expected(n, 0);  // what each source's signal word must reach
    int round = 0;
    for (size_t size : sizes) {
      for (int repeat = 0; repeat < 3; ++repeat, ++round) {
        std::vector<void*> requests;
        for (int dst = 0; dst < n; ++dst) {
          uint8_t* block = out.data() + static_cast<size_t>(dst) * maxSize;
          fillPattern(block, size, blockId(peer.rank, dst, round, size));
          // INC and ADD, strong and weak, alternately.
          uint32_t op = round % 2 == 0 ? abi::kSignalOpInc : abi::kSignalOpAdd;
          void* request = nullptr;
          ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, static_cast<size_t>(dst) * maxSize, outMh,
                                          size, static_cast<size_t>(peer.rank) * maxSize, inMh,
                                          dst, static_cast<uint64_t>(peer.rank) * 8, sigMh,
                                          round + 1, op, (round + dst) % 2 == 0, 0, &request),
                    abi::kSuccess);
          requests.push_back(request);
        }
        for (int src = 0; src < n; ++src) {
          expected[src] += round % 2 == 0 ? 1 : static_cast<uint64_t>(round + 1);
          ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signals[src], expected[src]));
          EXPECT_EQ(__atomic_load_n(&signals[src], __ATOMIC_ACQUIRE), expected[src])
              << "rank " << src << "'s signal overshot";
          ASSERT_TRUE(verifyPattern(in.data() + static_cast<size_t>(src) * maxSize, size,
                                    blockId(src, peer.rank, round, size)))
              << size << " bytes from rank " << src << " in round " << round
              << ": the signal came before its data";
        }
        for (void* request : requests) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
        // Nobody writes a block again before its target has checked it.
        ASSERT_TRUE(peer.barrier());
      }
    }
    EXPECT_EQ(signals[n], 0u) << "a signal landed past the words in use";
    for (void* mh : {outMh, inMh, sigMh}) ASSERT_NO_FATAL_FAILURE(deregWindow(rma, mh));
    ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
  }, 300);
}

TEST_P(AllToAll, GetsReadEveryRanksWindow) {
  const int nranks = GetParam();
  runRanks(nranks, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip);
    ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
    const int n = peer.nranks;
    const size_t block = 200000;
    HostBuffer mine(block * n), got(block * n);
    for (int dst = 0; dst < n; ++dst) {
      fillPattern(mine.data() + static_cast<size_t>(dst) * block, block,
                  blockId(peer.rank, dst, 7, block));
    }
    void *mineMh = nullptr, *gotMh = nullptr;
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, mine.data(), mine.size(), abi::kPtrHost, 0, &mineMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, got.data(), got.size(), abi::kPtrHost, 0, &gotMh));
    // Everyone's window is filled before anyone reads (regMrSym is collective, the fill is not).
    ASSERT_TRUE(peer.barrier());
    for (size_t size : {size_t{1}, size_t{64}, size_t{4095}, size_t{65536}, block}) {
      std::vector<void*> requests;
      for (int src = 0; src < n; ++src) {
        void* request = nullptr;
        ASSERT_EQ(rma.table->iget(rma.ctx, 0, static_cast<size_t>(peer.rank) * block, mineMh, size,
                                  static_cast<size_t>(src) * block, gotMh, src, 0, &request),
                  abi::kSuccess);
        requests.push_back(request);
      }
      for (void* request : requests) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
      for (int src = 0; src < n; ++src) {
        ASSERT_TRUE(verifyPattern(got.data() + static_cast<size_t>(src) * block, size,
                                  blockId(src, peer.rank, 7, block)))
            << size << " bytes read from rank " << src;
      }
    }
    ASSERT_TRUE(peer.barrier());  // nobody deregisters while others still read
    for (void* mh : {mineMh, gotMh}) ASSERT_NO_FATAL_FAILURE(deregWindow(rma, mh));
    ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
  }, 300);
}

TEST_P(AllToAll, ZeroByteSignalsAddUpExactly) {
  const int nranks = GetParam();
  runRanks(nranks, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip);
    ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
    const int n = peer.nranks;
    std::vector<uint64_t> signals(n, 0);
    void* sigMh = nullptr;
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, signals.data(), n * sizeof(uint64_t), abi::kPtrHost,
                                      abi::kMrFlagSignalNeverReset, &sigMh));
    // More signals to each target than a link has ring slots: credits must come back.
    constexpr int kSignals = 300;
    std::vector<void*> requests;
    for (int i = 0; i < kSignals; ++i) {
      for (int dst = 0; dst < n; ++dst) {
        void* request = nullptr;
        // No data, no data windows: a pure signal (the GIN proxy's VA signals look so).
        ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, nullptr, 0, 0, nullptr, dst,
                                        static_cast<uint64_t>(peer.rank) * 8, sigMh, i + 1,
                                        i % 3 == 0 ? abi::kSignalOpInc : abi::kSignalOpAdd,
                                        i % 2 == 0, 0, &request),
                  abi::kSuccess);
        requests.push_back(request);
      }
      // Keep at most a few hundred in flight, as NCCL's proxy queues do.
      if (requests.size() >= 256) {
        for (void* request : requests) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
        requests.clear();
      }
    }
    for (void* request : requests) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
    uint64_t total = 0;
    for (int i = 0; i < kSignals; ++i) total += i % 3 == 0 ? 1 : static_cast<uint64_t>(i + 1);
    for (int src = 0; src < n; ++src) {
      ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signals[src], total));
      EXPECT_EQ(__atomic_load_n(&signals[src], __ATOMIC_ACQUIRE), total) << "from rank " << src;
    }
    ASSERT_TRUE(peer.barrier());
    ASSERT_NO_FATAL_FAILURE(deregWindow(rma, sigMh));
    ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
  }, 300);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAll, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

}  // namespace
}  // namespace nnf::test
