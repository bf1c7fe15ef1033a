// 10^5 RMA operations in random order among 4 ranks: puts, weak puts with signals and gets of
// random sizes to random ranks on random contexts, each round closed by a strong zero-byte
// signal per target, after which the target checks every byte the round put into it (a strong
// signal makes every earlier put of its source visible). Every rank draws every source's
// operations from the same seeds, so targets know what to expect without being told.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rma_ops.h"

namespace nnf::test {
namespace {

constexpr int kRanks = 4;
constexpr int kRounds = 10;
constexpr int kOpsPerTarget = 625;  // 4 ranks x 10 rounds x 4 targets x 625 = 100,000
constexpr uint64_t kStrongAdd = 1000000;

enum class Kind { kPut, kPutSignal, kGet };
struct Op {
  Kind kind;
  int target;
  size_t size;
  size_t offset;  // in the target's region for this source (put) or this rank's got region
  int context;
  uint64_t remoteOffset;  // gets: where in the target's static window
};

// Source `src`'s operations of round `round`, in the order it issues them.
std::vector<Op> opsOf(int src, int round, size_t staticBytes) {
  std::mt19937_64 random((uint64_t{static_cast<uint32_t>(src)} << 32) | static_cast<uint32_t>(round));
  std::vector<Op> ops;
  std::vector<size_t> used(kRanks, 0), gotUsed(kRanks, 0);
  std::vector<int> left(kRanks, kOpsPerTarget);
  for (int i = 0; i < kRanks * kOpsPerTarget; ++i) {
    Op op{};
    // Random targets, but each gets kOpsPerTarget: draw among those with operations left.
    do {
      op.target = static_cast<int>(random() % kRanks);
    } while (left[static_cast<size_t>(op.target)] == 0);
    --left[static_cast<size_t>(op.target)];
    int roll = static_cast<int>(random() % 100);
    op.kind = roll < 45 ? Kind::kPut : roll < 85 ? Kind::kPutSignal : Kind::kGet;
    int sizeRoll = static_cast<int>(random() % 100);
    op.size = sizeRoll < 70   ? random() % 257
              : sizeRoll < 95 ? 257 + random() % 8000
                              : 8257 + random() % 60000;
    op.context = static_cast<int>(random() % 2);
    std::vector<size_t>& cursor = op.kind == Kind::kGet ? gotUsed : used;
    op.offset = cursor[static_cast<size_t>(op.target)];
    cursor[static_cast<size_t>(op.target)] += (op.size + 7) & ~size_t{7};
    op.remoteOffset = op.size > 0 ? random() % (staticBytes - op.size) : 0;
    ops.push_back(op);
  }
  return ops;
}

uint64_t putId(int src, int dst, int round, int index) {
  return (uint64_t{static_cast<uint32_t>(src)} << 56) ^ (uint64_t{static_cast<uint32_t>(dst)} << 48) ^
         (uint64_t{static_cast<uint32_t>(round)} << 32) ^ static_cast<uint32_t>(index);
}

TEST(RmaRandom, AHundredThousandOperationsInRandomOrder) {
  runRanks(kRanks, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip);
    ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma, 2));
    const size_t staticBytes = 1 << 20;
    // A region per source (puts) or per target (gets), large enough for any round.
    size_t region = 0;
    for (int round = 0; round < kRounds; ++round) {
      for (int src = 0; src < kRanks; ++src) {
        std::vector<size_t> used(kRanks, 0);
        for (const Op& op : opsOf(src, round, staticBytes)) {
          used[static_cast<size_t>(op.target)] += (op.size + 7) & ~size_t{7};
        }
        for (size_t u : used) region = std::max(region, u);
      }
    }
    HostBuffer out(region * kRanks), in(region * kRanks), got(region * kRanks),
        stat(staticBytes);
    std::vector<uint64_t> signals(kRanks, 0);
    fillPattern(stat.data(), staticBytes, 0xabc000 + peer.rank);
    void *outMh, *inMh, *gotMh, *statMh, *sigMh;
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, out.data(), out.size(), abi::kPtrHost, 0, &outMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, in.data(), in.size(), abi::kPtrHost, 0, &inMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, got.data(), got.size(), abi::kPtrHost, 0, &gotMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, stat.data(), stat.size(), abi::kPtrHost, 0, &statMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, signals.data(), kRanks * sizeof(uint64_t),
                                      abi::kPtrHost, abi::kMrFlagSignalNeverReset, &sigMh));
    ASSERT_TRUE(peer.barrier());
    std::vector<uint64_t> expected(kRanks, 0);
    size_t issued = 0;
    for (int round = 0; round < kRounds; ++round) {
      std::vector<Op> ops = opsOf(peer.rank, round, staticBytes);
      std::vector<int> index(kRanks, 0);
      std::vector<void*> inFlight;
      std::vector<const Op*> inFlightOps;
      auto drain = [&](size_t keep) {
        while (inFlight.size() > keep) {
          ASSERT_NO_FATAL_FAILURE(waitRma(rma, inFlight.front()));
          const Op* op = inFlightOps.front();
          if (op != nullptr && op->kind == Kind::kGet) {
            const uint8_t* read = got.data() + static_cast<size_t>(op->target) * region + op->offset;
            for (size_t k = 0; k < op->size; ++k) {
              ASSERT_EQ(read[k], patternByte(0xabc000 + op->target, op->remoteOffset + k))
                  << "byte " << k << " of " << op->size << " read from rank " << op->target
                  << " at offset " << op->remoteOffset;
            }
          }
          inFlight.erase(inFlight.begin());
          inFlightOps.erase(inFlightOps.begin());
        }
      };
      for (const Op& op : ops) {
        int i = index[static_cast<size_t>(op.target)]++;
        void* request = nullptr;
        size_t local = static_cast<size_t>(op.target) * region + op.offset;
        if (op.kind == Kind::kGet) {
          ASSERT_EQ(rma.table->iget(rma.ctx, op.context, op.remoteOffset, statMh, op.size, local,
                                    gotMh, op.target, 0, &request),
                    abi::kSuccess);
        } else {
          fillPattern(out.data() + local, op.size, putId(peer.rank, op.target, round, i));
          size_t remote = static_cast<size_t>(peer.rank) * region + op.offset;
          if (op.kind == Kind::kPut) {
            ASSERT_EQ(rma.table->iput(rma.ctx, op.context, local, outMh, op.size, remote, inMh,
                                      op.target, 0, &request),
                      abi::kSuccess);
          } else {
            ASSERT_EQ(rma.table->iputSignal(rma.ctx, op.context, local, outMh, op.size, remote,
                                            inMh, op.target,
                                            static_cast<uint64_t>(peer.rank) * 8, sigMh, 1,
                                            abi::kSignalOpAdd, false, 0, &request),
                      abi::kSuccess);
          }
        }
        inFlight.push_back(request);
        inFlightOps.push_back(&op);
        ++issued;
        // NCCL's proxy keeps at most 32 x maxRecvs per peer in flight; a few hundred here.
        ASSERT_NO_FATAL_FAILURE(drain(400));
      }
      // The round's last word to each target: strong, so it lands after everything above.
      for (int dst = 0; dst < kRanks; ++dst) {
        void* request = nullptr;
        ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, nullptr, 0, 0, nullptr, dst,
                                        static_cast<uint64_t>(peer.rank) * 8, sigMh, kStrongAdd,
                                        abi::kSignalOpAdd, true, 0, &request),
                  abi::kSuccess);
        inFlight.push_back(request);
        inFlightOps.push_back(nullptr);
      }
      // As a target: each source's strong signal, then every byte it put this round.
      for (int src = 0; src < kRanks; ++src) {
        std::vector<Op> theirs = opsOf(src, round, staticBytes);
        uint64_t weak = 0;
        for (const Op& op : theirs) weak += op.target == peer.rank && op.kind == Kind::kPutSignal;
        expected[static_cast<size_t>(src)] += weak + kStrongAdd;
        ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signals[static_cast<size_t>(src)],
                                         expected[static_cast<size_t>(src)]));
        std::vector<int> their(kRanks, 0);
        for (const Op& op : theirs) {
          int i = their[static_cast<size_t>(op.target)]++;
          if (op.target != peer.rank || op.kind == Kind::kGet) continue;
          ASSERT_TRUE(verifyPattern(in.data() + static_cast<size_t>(src) * region + op.offset,
                                    op.size, putId(src, peer.rank, round, i)))
              << "operation " << i << " of rank " << src << " in round " << round << " ("
              << op.size << " bytes) not visible after the strong signal";
        }
      }
      ASSERT_NO_FATAL_FAILURE(drain(0));
      ASSERT_TRUE(peer.barrier());
    }
    EXPECT_EQ(issued, static_cast<size_t>(kRounds * kRanks * kOpsPerTarget));
    for (void* mh : {outMh, inMh, gotMh, statMh, sigMh}) ASSERT_NO_FATAL_FAILURE(deregWindow(rma, mh));
    ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
  }, 900);
}

}  // namespace
}  // namespace nnf::test
