// Bad input to the RMA plugin, as a buggy caller would pass it: foreign and stale handles,
// offsets and sizes outside a window, ranks out of range, unaligned signal words, unknown signal
// operations, NULL outputs. Each is one WARN and ncclInvalidUsage (arguments) or
// ncclInternalError (handles), never a crash; the group goes on working afterwards. A signal
// word that is misaligned at the target is the target's error: one WARN there and
// queryLastError says so.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rma_ops.h"

namespace nnf::test {
namespace {

// `call` returns `expected` with exactly one new WARN.
#define EXPECT_ONE_WARN(expected, call)                                \
  do {                                                                 \
    int before = peer.warnings();                                      \
    EXPECT_EQ((call), (expected)) << #call;                            \
    EXPECT_EQ(peer.warnings() - before, 1)                             \
        << #call << ": " << peer.warnings() - before << " WARN lines"; \
  } while (0)

TEST(RmaErrors, BadArgumentsAreOneWarnEachAndTheGroupGoesOn) {
  runRanks(2, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip);
    const abi::RmaV15& t = *rma.table;
    ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
    HostBuffer data(65536);
    std::vector<uint64_t> signals(2, 0);
    void *dataMh, *sigMh;
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, data.data(), data.size(), abi::kPtrHost, 0, &dataMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, signals.data(), 16, abi::kPtrHost, 0, &sigMh));
    const uint32_t other = 1 - peer.rank;
    // Readable memory that is no handle of ours: foreign pointers must be refused, not followed.
    std::vector<uint8_t> junk(4096, 0x5a);
    void* bogus = junk.data();
    void* request = nullptr;

    EXPECT_ONE_WARN(abi::kInternalError,
                    t.iput(bogus, 0, 0, dataMh, 8, 0, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInternalError,
                    t.iput(rma.ctx, 0, 0, bogus, 8, 0, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInternalError,
                    t.iput(rma.ctx, 0, 0, dataMh, 8, 0, bogus, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInternalError,
                    t.iput(rma.ctx, 0, 0, dataMh, 8, 0, dataMh, other, 0, nullptr));
    EXPECT_ONE_WARN(abi::kInternalError,
                    t.iput(rma.ctx, 0, 0, nullptr, 8, 0, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iput(rma.ctx, 0, 65536 - 4, dataMh, 8, 0, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iput(rma.ctx, 0, 0, dataMh, 8, 65536, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iput(rma.ctx, 0, 0, dataMh, size_t{1} << 40, 0, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iput(rma.ctx, 0, 0, dataMh, 8, 0, dataMh, 2, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iput(rma.ctx, 0, 0, dataMh, 8, 0, dataMh, 0xffffffffu, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iput(rma.ctx, 3, 0, dataMh, 8, 0, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iputSignal(rma.ctx, 0, 0, dataMh, 8, 0, dataMh, other, 4, sigMh, 1,
                                 abi::kSignalOpInc, true, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iputSignal(rma.ctx, 0, 0, dataMh, 8, 0, dataMh, other, 16, sigMh, 1,
                                 abi::kSignalOpInc, true, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage, t.iputSignal(rma.ctx, 0, 0, dataMh, 8, 0, dataMh, other, 0,
                                                     sigMh, 1, 3, true, 0, &request));
    EXPECT_ONE_WARN(abi::kInternalError,
                    t.iputSignal(rma.ctx, 0, 0, nullptr, 0, 0, nullptr, other, 0, nullptr, 1,
                                 abi::kSignalOpInc, true, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iget(rma.ctx, 0, 65000, dataMh, 1000, 0, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.iget(rma.ctx, 0, 0, dataMh, 1000, 65000, dataMh, other, 0, &request));
    EXPECT_ONE_WARN(abi::kInvalidUsage, t.iflush(rma.ctx, 0, dataMh, 7, &request));
    EXPECT_ONE_WARN(abi::kInternalError, t.iflush(rma.ctx, 0, bogus, other, &request));
    int done = 0;
    EXPECT_ONE_WARN(abi::kInternalError, t.test(rma.coll, bogus, &done));
    EXPECT_ONE_WARN(abi::kInternalError, t.test(bogus, bogus, &done));
    EXPECT_ONE_WARN(abi::kInternalError, t.rmaProgress(bogus));
    bool failed = true;
    EXPECT_ONE_WARN(abi::kInternalError, t.queryLastError(rma.ctx, nullptr));
    EXPECT_ONE_WARN(abi::kInternalError, t.queryLastError(bogus, &failed));
    EXPECT_ONE_WARN(abi::kInternalError, t.deregMrSym(rma.coll, bogus));
    EXPECT_ONE_WARN(abi::kInternalError, t.deregMrSym(bogus, dataMh));
    void* mh = nullptr;
    EXPECT_ONE_WARN(abi::kInvalidUsage,
                    t.regMrSym(rma.coll, data.data(), 4096, 9, 0, &mh));  // no such memory type
    EXPECT_ONE_WARN(abi::kInternalError,
                    t.regMrSymDmaBuf(rma.coll, data.data(), 4096, abi::kPtrDmaBuf, 0, -1, 0, &mh));
    abi::RmaConfigV15 none{0, abi::kTrafficClassUndef, 1};
    void* ctx = nullptr;
    EXPECT_ONE_WARN(abi::kInvalidUsage, t.createContext(rma.coll, &none, &ctx));
    EXPECT_ONE_WARN(abi::kInternalError, t.destroyContext(bogus));
    char handle[abi::kHandleMaxSize];
    void* listen = nullptr;
    EXPECT_ONE_WARN(abi::kInternalError, t.listen(rma.instance, 42, handle, &listen));
    EXPECT_ONE_WARN(abi::kInternalError, t.closeListen(bogus));
    EXPECT_ONE_WARN(abi::kInternalError, t.finalize(bogus));

    // A completed request tested again is no longer ours to report.
    fillPattern(data.data(), 4096, 31 + peer.rank);
    ASSERT_EQ(t.iputSignal(rma.ctx, 0, 0, dataMh, 4096, 8192, dataMh, other, 0, sigMh, 1,
                           abi::kSignalOpInc, true, 0, &request),
              abi::kSuccess);
    ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
    EXPECT_ONE_WARN(abi::kInternalError, t.test(rma.coll, request, &done));
    // ...and after all that, the group still moves data, signals after data.
    ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signals[0], 1));
    EXPECT_TRUE(verifyPattern(data.data() + 8192, 4096, 31 + other));
    ASSERT_EQ(t.queryLastError(rma.ctx, &failed), abi::kSuccess);
    EXPECT_FALSE(failed) << "bad arguments are the caller's errors, not the group's";
    ASSERT_TRUE(peer.barrier());
    for (void* m : {dataMh, sigMh}) ASSERT_NO_FATAL_FAILURE(deregWindow(rma, m));
    ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
  });
}

TEST(RmaErrors, ForeignOrDamagedHandlesAreRefusedAtConnect) {
  runRanks(2, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip);
    const abi::RmaV15& t = *rma.table;
    char handle[abi::kHandleMaxSize] = {};
    void* listen = nullptr;
    ASSERT_EQ(t.listen(rma.instance, peer.dev, handle, &listen), abi::kSuccess);
    std::vector<char> all(2 * abi::kHandleMaxSize);
    ASSERT_TRUE(peer.allGather(handle, sizeof(handle), all.data()));
    void* handles[2] = {all.data(), all.data() + abi::kHandleMaxSize};
    void* coll = nullptr;
    // Every rank sees the same bad handle, so every rank refuses before it sends anything.
    std::vector<char> damaged(all);
    damaged[abi::kHandleMaxSize + 40] ^= 0x10;
    void* bad[2] = {damaged.data(), damaged.data() + abi::kHandleMaxSize};
    int before = peer.warnings();
    EXPECT_EQ(t.connect(nullptr, bad, 2, peer.rank, listen, &coll), abi::kInvalidUsage);
    EXPECT_EQ(peer.warnings() - before, 1);
    // Rank r's own slot holding another rank's handle.
    void* swapped[2] = {handles[1], handles[0]};
    before = peer.warnings();
    EXPECT_EQ(t.connect(nullptr, swapped, 2, peer.rank, listen, &coll), abi::kInvalidUsage);
    EXPECT_EQ(peer.warnings() - before, 1);
    before = peer.warnings();
    EXPECT_EQ(t.connect(nullptr, handles, 2, 2, listen, &coll), abi::kInvalidUsage);
    EXPECT_EQ(t.connect(nullptr, handles, 2, peer.rank, handles[0], &coll), abi::kInternalError);
    EXPECT_EQ(peer.warnings() - before, 2);
    // The real thing still works afterwards.
    ASSERT_EQ(t.connect(nullptr, handles, 2, peer.rank, listen, &coll), abi::kSuccess);
    ASSERT_EQ(t.closeListen(listen), abi::kSuccess);
    ASSERT_EQ(t.closeColl(coll), abi::kSuccess);
    before = peer.warnings();
    EXPECT_EQ(t.closeColl(coll), abi::kInternalError) << "a double close";
    EXPECT_EQ(peer.warnings() - before, 1);
    ASSERT_EQ(t.finalize(rma.instance), abi::kSuccess);
  });
}

TEST(RmaErrors, AMisalignedSignalWordIsTheTargetsErrorAndQueryLastErrorSaysSo) {
  runRanks(2, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip);
    ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
    // The window starts one byte into an allocation: offset 0 is an aligned offset, but the
    // word it names at the target is not an aligned 64-bit word.
    HostBuffer raw(4096);
    memset(raw.data(), 0, raw.size());  // checked below: the bad signal must leave it so
    void* sigMh = nullptr;
    // Counted from before the registration: rank 0 may send its signal as soon as its own
    // regMrSym returns, and the entry can land while this rank's regMrSym still progresses.
    int before = peer.warnings();
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, raw.data() + 1, 64, abi::kPtrHost, 0, &sigMh));
    void* request = nullptr;
    if (peer.rank == 0) {
      ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, nullptr, 0, 0, nullptr, 1, 0, sigMh, 1,
                                      abi::kSignalOpInc, true, 0, &request),
                abi::kSuccess);
      ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
    } else {
      bool failed = false;
      Deadline deadline(kRmaTimeoutSec);
      while (!failed) {
        ASSERT_FALSE(deadline.expired()) << "the bad signal never arrived";
        ASSERT_EQ(rma.table->rmaProgress(rma.ctx), abi::kSuccess);
        ASSERT_EQ(rma.table->queryLastError(rma.ctx, &failed), abi::kSuccess);
      }
      EXPECT_EQ(peer.warnings() - before, 1);
      uint64_t word = 0;
      memcpy(&word, raw.data() + 1, 8);
      EXPECT_EQ(word, 0u) << "a misaligned word must not be written";
    }
    ASSERT_TRUE(peer.barrier());
    ASSERT_NO_FATAL_FAILURE(deregWindow(rma, sigMh));
    ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
  });
}

}  // namespace
}  // namespace nnf::test
