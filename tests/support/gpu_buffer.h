// GPU memory of the fake CUDA driver the plugin loaded (tests/fake_cuda), for functional tests:
// allocated, filled and read back through the driver's own calls, so that on softefa, where the
// CPU cannot touch it, only the NIC and the driver's copies do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "nccl_net/types.h"
#include "support/fake_cuda_controls.h"
#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

namespace nnf::test {

// cuMemAlloc memory of the fake driver the plugin loaded, filled and read back through it.
class GpuBuffer {
 public:
  GpuBuffer(FakeControls& fake, size_t size) : fake_(fake), size_(size) {
    EXPECT_EQ(fake_.memAlloc(&address_, size_), 0) << "cuMemAlloc of " << size << " bytes";
  }
  ~GpuBuffer() {
    if (address_ != 0) fake_.memFree(address_);
  }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  uint8_t* data() const { return reinterpret_cast<uint8_t*>(address_); }
  size_t size() const { return size_; }
  void fill(size_t size, uint64_t seed) {
    std::vector<uint8_t> host(size_);
    fillSentinel(host.data(), size_);
    fillPattern(host.data(), size, seed);
    EXPECT_EQ(fake_.copyToDevice(address_, host.data(), size_), 0);
  }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> host(size_);
    EXPECT_EQ(fake_.copyFromDevice(host.data(), address_, size_), 0);
    return host;
  }

 private:
  FakeControls& fake_;
  size_t size_;
  unsigned long long address_ = 0;
};

// Opens the fake driver, allocates `size` bytes of its memory and registers them for `comm` as
// CUDA memory (*mh). The caller deletes *buffer after deregistering.
inline void openFakeAndRegister(Peer& peer, void* comm, FakeControls* fake, GpuBuffer** buffer,
                                size_t size, void** mh) {
  ASSERT_NO_FATAL_FAILURE(openFake(fakeCudaLibrary(), fake));
  ASSERT_NE(fake->memAlloc, nullptr);
  *buffer = new GpuBuffer(*fake, size);
  ASSERT_EQ(peer.net->regMr(comm, (*buffer)->data(), size, abi::kPtrCuda, mh), abi::kSuccess);
}

// What NCCL does after a GPU receive of `received` bytes into `gpu` (registered as `mh` for
// `comm`): iflush, and wait for the flush when the plugin returns one.
inline void flushReceive(Peer& peer, void* comm, GpuBuffer& gpu, int received, void* mh) {
  void* data[1] = {gpu.data()};
  int sizes[1] = {received};
  void* handles[1] = {mh};
  void* flush = nullptr;
  ASSERT_EQ(peer.net->iflush(comm, 1, data, sizes, handles, &flush), abi::kSuccess);
  if (flush != nullptr) {
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, flush, nullptr));
  }
}

// `gpu`, read back through the driver, holds message `seed` (`size` bytes of its pattern) and
// its sentinels to the end.
inline void expectMessageIn(const GpuBuffer& gpu, size_t size, uint64_t seed) {
  std::vector<uint8_t> bytes = gpu.read();
  EXPECT_TRUE(verifyPattern(bytes.data(), size, seed));
  EXPECT_TRUE(verifySentinel(bytes.data() + size, gpu.size() - size));
}

}  // namespace nnf::test
