// Symmetric windows registered and deregistered while another window carries traffic: each
// iteration puts into the long-lived window without waiting, registers a fresh window (regMrSym
// is collective), puts into it with signals, checks it, deregisters it, and only then waits for
// and checks the long-lived window's data. Window numbering must agree on every rank throughout.
#include <gtest/gtest.h>

#include <vector>

#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rma_ops.h"

namespace nnf::test {
namespace {

TEST(RmaWindows, RegisteredAndDeregisteredWhileAnotherCarriesTraffic) {
  runRanks(3, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip);
    ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
    const int n = peer.nranks;
    const int right = (peer.rank + 1) % n;
    const int left = (peer.rank + n - 1) % n;
    const size_t longBytes = 512 << 10;
    HostBuffer longOut(longBytes), longIn(longBytes);
    std::vector<uint64_t> signals(2 * n, 0);
    void *longOutMh, *longInMh, *sigMh;
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, longOut.data(), longBytes, abi::kPtrHost, 0, &longOutMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, longIn.data(), longBytes, abi::kPtrHost, 0, &longInMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, signals.data(), signals.size() * 8, abi::kPtrHost,
                                      abi::kMrFlagSignalNeverReset, &sigMh));
    for (int iteration = 0; iteration < 12; ++iteration) {
      // The long-lived window's put, left in flight across the registrations below.
      fillPattern(longOut.data(), longBytes, 0x100 + iteration * 16 + peer.rank);
      void* longPut = nullptr;
      ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, longOutMh, longBytes, 0, longInMh, right,
                                      static_cast<uint64_t>(peer.rank) * 8, sigMh, 1,
                                      abi::kSignalOpInc, true, 0, &longPut),
                abi::kSuccess);
      // A window of a size that changes every time, registered and gone within the iteration.
      const size_t bytes = 4096 + static_cast<size_t>(iteration) * 12345;
      HostBuffer freshOut(bytes), freshIn(bytes * n);
      void *freshOutMh, *freshInMh;
      ASSERT_NO_FATAL_FAILURE(regWindow(rma, freshOut.data(), bytes, abi::kPtrHost, 0, &freshOutMh));
      ASSERT_NO_FATAL_FAILURE(regWindow(rma, freshIn.data(), bytes * n, abi::kPtrHost, 0, &freshInMh));
      fillPattern(freshOut.data(), bytes, 0x9000 + iteration * 16 + peer.rank);
      std::vector<void*> requests;
      for (int dst = 0; dst < n; ++dst) {
        void* request = nullptr;
        ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, freshOutMh, bytes,
                                        static_cast<size_t>(peer.rank) * bytes, freshInMh, dst,
                                        static_cast<uint64_t>(n + peer.rank) * 8, sigMh, 1,
                                        abi::kSignalOpInc, false, 0, &request),
                  abi::kSuccess);
        requests.push_back(request);
      }
      for (int src = 0; src < n; ++src) {
        ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signals[n + src], iteration + 1));
        ASSERT_TRUE(verifyPattern(freshIn.data() + static_cast<size_t>(src) * bytes, bytes,
                                  0x9000 + iteration * 16 + src))
            << "iteration " << iteration << ", window of " << bytes << " bytes, from rank " << src;
      }
      for (void* request : requests) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
      ASSERT_TRUE(peer.barrier());  // nobody still writes into the fresh windows
      ASSERT_NO_FATAL_FAILURE(deregWindow(rma, freshOutMh));
      ASSERT_NO_FATAL_FAILURE(deregWindow(rma, freshInMh));
      // The long-lived window's put went on meanwhile.
      ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signals[left], iteration + 1));
      ASSERT_TRUE(verifyPattern(longIn.data(), longBytes, 0x100 + iteration * 16 + left))
          << "iteration " << iteration << ": the long-lived window's data";
      ASSERT_NO_FATAL_FAILURE(waitRma(rma, longPut));
      ASSERT_TRUE(peer.barrier());
    }
    for (void* mh : {longOutMh, longInMh, sigMh}) ASSERT_NO_FATAL_FAILURE(deregWindow(rma, mh));
    ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
  }, 300);
}

TEST(RmaWindows, ADeregisteredWindowIsRefusedAndTheOthersGoOn) {
  runRanks(2, [](RankPeer& peer) {
    Rma rma;
    bool skip = false;
    ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
    ASSERT_FALSE(skip);
    ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
    HostBuffer a(8192), b(8192);
    std::vector<uint64_t> signal(1, 0);
    void *aMh, *bMh, *sigMh;
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, a.data(), a.size(), abi::kPtrHost, 0, &aMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, b.data(), b.size(), abi::kPtrHost, 0, &bMh));
    ASSERT_NO_FATAL_FAILURE(regWindow(rma, signal.data(), 8, abi::kPtrHost, 0, &sigMh));
    ASSERT_NO_FATAL_FAILURE(deregWindow(rma, aMh));
    peer.resetWarnings();
    void* request = nullptr;
    EXPECT_EQ(rma.table->iput(rma.ctx, 0, 0, aMh, 64, 0, bMh, 1 - peer.rank, 0, &request),
              abi::kInternalError);
    EXPECT_EQ(peer.warnings(), 1) << "one WARN for the deregistered window";
    EXPECT_EQ(rma.table->deregMrSym(rma.coll, aMh), abi::kInternalError) << "a double dereg";
    EXPECT_EQ(peer.warnings(), 2);
    fillPattern(b.data(), 4096, 77 + peer.rank);
    ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, bMh, 4096, 4096, bMh, 1 - peer.rank, 0, sigMh,
                                    1, abi::kSignalOpInc, true, 0, &request),
              abi::kSuccess);
    ASSERT_NO_FATAL_FAILURE(waitWord(rma, &signal[0], 1));
    EXPECT_TRUE(verifyPattern(b.data() + 4096, 4096, 77 + (1 - peer.rank)));
    ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
    ASSERT_TRUE(peer.barrier());
    ASSERT_NO_FATAL_FAILURE(deregWindow(rma, bMh));
    ASSERT_NO_FATAL_FAILURE(deregWindow(rma, sigMh));
    ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
  });
}

}  // namespace
}  // namespace nnf::test
