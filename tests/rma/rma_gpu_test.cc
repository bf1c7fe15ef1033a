// GPU windows through the fake CUDA driver (tests/fake_cuda): data and signal words in device
// memory, which the plugin must never touch with the CPU (on softefa that memory is mapped
// PROT_NONE in the process, so a CPU store is a crash; on the EFA-rules stand-in, inject or a
// missing descriptor on it is a reported rule). Signals into GPU memory are written by the NIC
// (loopback RDMA) after the data; the tests read both only through the driver's copies.
#include <gtest/gtest.h>

#include <vector>

#include "support/fake_cuda_controls.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rma_ops.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

class GpuMemory {
 public:
  GpuMemory(FakeControls& fake, size_t size) : fake_(fake), size_(size) {
    EXPECT_EQ(fake_.memAlloc(&ptr_, size), 0);
  }
  ~GpuMemory() { fake_.memFree(ptr_); }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  void fill(size_t offset, size_t size, uint64_t id) {
    std::vector<uint8_t> host(size);
    fillPattern(host.data(), size, id);
    EXPECT_EQ(fake_.copyToDevice(ptr_ + offset, host.data(), size), 0);
  }
  void zero() {
    std::vector<uint8_t> host(size_, 0);
    EXPECT_EQ(fake_.copyToDevice(ptr_, host.data(), size_), 0);
  }
  std::vector<uint8_t> read(size_t offset, size_t size) const {
    std::vector<uint8_t> host(size);
    EXPECT_EQ(fake_.copyFromDevice(host.data(), ptr_ + offset, size), 0);
    return host;
  }
  uint64_t word(size_t offset) const {
    uint64_t value = 0;
    EXPECT_EQ(fake_.copyFromDevice(&value, ptr_ + offset, sizeof(value)), 0);
    return value;
  }

 private:
  FakeControls& fake_;
  unsigned long long ptr_ = 0;
  size_t size_;
};

// rmaProgress until the GPU word at `offset` reaches `value` (read through the driver).
void waitGpuWord(Rma& rma, const GpuMemory& memory, size_t offset, uint64_t value) {
  Deadline deadline(kRmaTimeoutSec);
  uint64_t spins = 0;
  for (;;) {
    uint64_t now = memory.word(offset);
    if (now >= value) {
      EXPECT_EQ(now, value) << "the GPU signal word at " << offset << " overshot";
      return;
    }
    ASSERT_FALSE(deadline.expired())
        << "the GPU signal word at " << offset << " stays at " << now << ", waiting for " << value;
    ASSERT_EQ(rma.table->rmaProgress(rma.ctx), abi::kSuccess);
    idle(&spins);
  }
}

bool openGpu(RankPeer& peer, Rma& rma, FakeControls* fake) {
  if ((rma.props.ptrSupport & abi::kPtrCuda) == 0) return false;
  openFake(fakeCudaLibrary(), fake);
  return fake->memAlloc != nullptr;
}

class GpuWindows : public ::testing::TestWithParam<int> {};

TEST_P(GpuWindows, PutWithSignalIntoGpuMemoryLandsBeforeItsSignal) {
  if (testProvider() != "efa") GTEST_SKIP() << "GPU memory needs the fake driver (efa, softefa)";
  runRanks(
      GetParam(),
      [](RankPeer& peer) {
        Rma rma;
        bool skip = false;
        ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
        ASSERT_FALSE(skip);
        FakeControls fake;
        ASSERT_TRUE(openGpu(peer, rma, &fake)) << "ptrSupport " << rma.props.ptrSupport;
        ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
        const int n = peer.nranks;
        const size_t block = 96 << 10;
        GpuMemory out(fake, block * n), in(fake, block * n), signals(fake, 8 * (n + 1)),
            resettable(fake, 8 * n);
        signals.zero();
        resettable.zero();
        HostBuffer hostOut(block);
        void *outMh, *inMh, *sigMh, *resetMh, *hostMh;
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, out.data(), block * n, abi::kPtrCuda, 0, &outMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, in.data(), block * n, abi::kPtrCuda, 0, &inMh));
        ASSERT_NO_FATAL_FAILURE(
            regWindow(rma, signals.data(), 8 * (n + 1), abi::kPtrCuda,
                      abi::kMrFlagForceStrongOrder | abi::kMrFlagSignalNeverReset, &sigMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, resettable.data(), 8 * n, abi::kPtrCuda,
                                          abi::kMrFlagForceStrongOrder, &resetMh));
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, hostOut.data(), block, abi::kPtrHost, 0, &hostMh));
        uint64_t expected = 0;
        for (int round = 0; round < 6; ++round) {
          // Small (it would be inline into host memory), medium, large; from GPU memory, and from
          // host memory into GPU memory every third round.
          const size_t size = round % 3 == 0 ? 48 : round % 3 == 1 ? 4000 : block;
          const bool fromHost = round % 3 == 2;
          std::vector<void*> requests;
          for (int dst = 0; dst < n; ++dst) {
            uint64_t id = 0x6000 + static_cast<uint64_t>(round * 64 + peer.rank * 8 + dst);
            void* request = nullptr;
            if (fromHost) {
              fillPattern(hostOut.data(), size, id);
              ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, hostMh, size,
                                              static_cast<size_t>(peer.rank) * block, inMh, dst,
                                              static_cast<uint64_t>(peer.rank) * 8, sigMh, 2,
                                              abi::kSignalOpAdd, true, 0, &request),
                        abi::kSuccess);
              ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));  // hostOut is reused for each target
              request = nullptr;
            } else {
              out.fill(static_cast<size_t>(dst) * block, size, id);
              ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, static_cast<size_t>(dst) * block, outMh,
                                              size, static_cast<size_t>(peer.rank) * block, inMh,
                                              dst, static_cast<uint64_t>(peer.rank) * 8, sigMh, 2,
                                              abi::kSignalOpAdd, round % 2 == 0, 0, &request),
                        abi::kSuccess);
            }
            if (request != nullptr) requests.push_back(request);
            // The same word of a window without NEVER_RESET: read back through the NIC each time.
            void* bump = nullptr;
            ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, nullptr, 0, 0, nullptr, dst,
                                            static_cast<uint64_t>(peer.rank) * 8, resetMh, 0,
                                            abi::kSignalOpInc, true, 0, &bump),
                      abi::kSuccess);
            requests.push_back(bump);
          }
          expected += 2;
          for (int src = 0; src < n; ++src) {
            ASSERT_NO_FATAL_FAILURE(
                waitGpuWord(rma, signals, static_cast<size_t>(src) * 8, expected));
            uint64_t id = 0x6000 + static_cast<uint64_t>(round * 64 + src * 8 + peer.rank);
            std::vector<uint8_t> data = in.read(static_cast<size_t>(src) * block, size);
            ASSERT_TRUE(verifyPattern(data.data(), size, id))
                << size << " bytes from rank " << src << " in round " << round
                << ": the GPU signal came before its data";
            ASSERT_NO_FATAL_FAILURE(
                waitGpuWord(rma, resettable, static_cast<size_t>(src) * 8, round + 1));
          }
          for (void* request : requests) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
          ASSERT_TRUE(peer.barrier());
        }
        EXPECT_EQ(signals.word(8 * n), 0u) << "a signal landed past the words in use";
        // Gets from every rank's GPU window into ours, then a flush before reading them.
        ASSERT_TRUE(peer.barrier());
        GpuMemory got(fake, 4096 * n);
        got.zero();
        void* gotMh = nullptr;
        ASSERT_NO_FATAL_FAILURE(regWindow(rma, got.data(), 4096 * n, abi::kPtrCuda, 0, &gotMh));
        std::vector<void*> gets;
        for (int src = 0; src < n; ++src) {
          void* request = nullptr;
          ASSERT_EQ(rma.table->iget(rma.ctx, 0, static_cast<size_t>(peer.rank) * block, inMh, 4096,
                                    static_cast<size_t>(src) * 4096, gotMh, src, 0, &request),
                    abi::kSuccess);
          gets.push_back(request);
        }
        // The flush is issued behind the gets: it completes once they have and their data is
        // visible to the GPU.
        void* flush = nullptr;
        ASSERT_EQ(rma.table->iflush(rma.ctx, 0, gotMh, peer.rank, &flush), abi::kSuccess);
        for (void* request : gets) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
        if (flush != nullptr) {
          ASSERT_NO_FATAL_FAILURE(waitRma(rma, flush));
        }
        for (int src = 0; src < n; ++src) {
          // Rank src's window holds, at our block, what we put there in the last round.
          uint64_t id = 0x6000 + static_cast<uint64_t>(5 * 64 + peer.rank * 8 + src);
          std::vector<uint8_t> data = got.read(static_cast<size_t>(src) * 4096, 4096);
          ASSERT_TRUE(verifyPattern(data.data(), 4096, id)) << "read from rank " << src;
        }
        ASSERT_NO_FATAL_FAILURE(deregWindow(rma, gotMh));
        void* hostFlush = reinterpret_cast<void*>(1);
        ASSERT_EQ(rma.table->iflush(rma.ctx, 0, hostMh, peer.rank, &hostFlush), abi::kSuccess);
        EXPECT_EQ(hostFlush, nullptr) << "host memory needs no flush";
        ASSERT_TRUE(peer.barrier());
        for (void* mh : {outMh, inMh, sigMh, resetMh, hostMh})
          ASSERT_NO_FATAL_FAILURE(deregWindow(rma, mh));
        ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
      },
      300);
}

TEST_P(GpuWindows, StrongSignalsFromEveryRankIntoOneGpuWordAddUpExactly) {
  if (testProvider() != "efa") GTEST_SKIP() << "GPU memory needs the fake driver (efa, softefa)";
  runRanks(
      GetParam(),
      [](RankPeer& peer) {
        Rma rma;
        bool skip = false;
        ASSERT_NO_FATAL_FAILURE(openRma(peer, &rma, &skip));
        ASSERT_FALSE(skip);
        FakeControls fake;
        ASSERT_TRUE(openGpu(peer, rma, &fake));
        ASSERT_NO_FATAL_FAILURE(connectRma(peer, &rma));
        GpuMemory word(fake, 64);
        word.zero();
        void* wordMh = nullptr;
        ASSERT_NO_FATAL_FAILURE(
            regWindow(rma, word.data(), 64, abi::kPtrCuda,
                      abi::kMrFlagForceStrongOrder | abi::kMrFlagSignalNeverReset, &wordMh));
        constexpr int kEach = 200;
        std::vector<void*> requests;
        for (int i = 0; i < kEach; ++i) {
          for (int dst = 0; dst < peer.nranks; ++dst) {
            void* request = nullptr;
            ASSERT_EQ(rma.table->iputSignal(rma.ctx, 0, 0, nullptr, 0, 0, nullptr, dst, 8, wordMh,
                                            i + 1, abi::kSignalOpAdd, i % 4 != 0, 0, &request),
                      abi::kSuccess);
            requests.push_back(request);
          }
          if (requests.size() >= 128) {
            for (void* request : requests) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
            requests.clear();
          }
        }
        for (void* request : requests) ASSERT_NO_FATAL_FAILURE(waitRma(rma, request));
        uint64_t total = static_cast<uint64_t>(peer.nranks) * kEach * (kEach + 1) / 2;
        ASSERT_NO_FATAL_FAILURE(waitGpuWord(rma, word, 8, total));
        EXPECT_EQ(word.word(0), 0u);
        EXPECT_EQ(word.word(16), 0u);
        ASSERT_TRUE(peer.barrier());
        ASSERT_NO_FATAL_FAILURE(deregWindow(rma, wordMh));
        ASSERT_NO_FATAL_FAILURE(closeRma(peer, &rma));
      },
      300);
}

INSTANTIATE_TEST_SUITE_P(Ranks, GpuWindows, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

}  // namespace
}  // namespace nnf::test
