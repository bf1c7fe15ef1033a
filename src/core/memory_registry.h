// Memory registration for one device: NCCL's buffer type and pointer become a region (host,
// CUDA with its device ordinal, or DMA-BUF), which the MR cache registers with the provider
// once and shares between every regMr that falls inside it.
#pragma once

#include <atomic>
#include <memory>

#include "abi/nccl_abi.h"
#include "core/memory_handle.h"
#include "memory/cuda_driver.h"
#include "memory/mr_cache.h"
#include "memory/region.h"

namespace nnf::core {

class MemoryRegistry {
 public:
  // `registrar` registers with the provider (it takes the domain lock itself: never call this
  // class with the device lock held). `cuda` may be null (no CUDA); `gpuAccess` adds access bits
  // to GPU regions (FI_REMOTE_READ when flushes read them back).
  // `hostDescriptors`: the provider wants descriptors for host buffers too (FI_MR_LOCAL);
  // otherwise host operations go without one, which keeps providers on their fastest path.
  MemoryRegistry(memory::Registrar& registrar, const memory::MrCacheOptions& options,
                 const memory::CudaDriver* cuda, int ptrSupport, uint64_t gpuAccess,
                 bool hostDescriptors = true);

  abi::Result registerBuffer(void* data, size_t size, int ncclType, int dmabufFd,
                             uint64_t dmabufOffset, MemoryHandle** out);
  // Registers host memory with explicit access bits (the flush word).
  abi::Result registerHost(void* data, size_t size, uint64_t access, MemoryHandle** out);
  abi::Result deregister(MemoryHandle* handle);

  memory::MrCacheStats stats() const { return cache_.stats(); }
  int ptrSupport() const { return ptrSupport_; }

 private:
  abi::Result acquire(const memory::Region& region, int ncclType, MemoryHandle** out);

  memory::MrCache cache_;
  const memory::CudaDriver* cuda_;
  int ptrSupport_;
  uint64_t gpuAccess_;
  bool hostDescriptors_;
  std::atomic<bool> dmaBufRefused_{false};  // set by the first refused DMA-BUF registration
};

}  // namespace nnf::core
