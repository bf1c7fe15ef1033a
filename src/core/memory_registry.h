// Memory registration for one device: NCCL's buffer type and pointer become a region (host,
// CUDA with its device ordinal, or DMA-BUF), which the MR cache registers with the provider
// once and shares between every regMr that falls inside it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "core/memory_handle.h"
#include "fabric/domain_lock.h"
#include "memory/cuda_driver.h"
#include "memory/mr_cache.h"
#include "memory/region.h"
#include "nccl_net/types.h"

namespace nnf::core {

class MemoryRegistry {
 public:
  // `registrar` registers with the provider (it takes the domain lock itself: never call this
  // class with the device lock held). `cuda` may be null (no CUDA); `gpuAccess` adds access bits
  // to GPU regions (FI_REMOTE_READ when flushes read them back).
  // `hostDescriptors`: the provider wants descriptors for host buffers too (FI_MR_LOCAL);
  // otherwise host operations go without one, which keeps providers on their fastest path.
  // `dataAccess` adds access bits to every buffer NCCL registers (the rdma protocol writes into
  // them: FI_WRITE | FI_REMOTE_WRITE).
  MemoryRegistry(memory::Registrar& registrar, fabric::DomainLock& lock,
                 const memory::MrCacheOptions& options, const memory::CudaDriver* cuda,
                 int ptrSupport, uint64_t gpuAccess, bool hostDescriptors = true,
                 uint64_t dataAccess = 0);

  // `extraAccess`: bits beyond what NCCL's net buffers get (the RMA layer's windows are read
  // and written by peers: FI_READ | FI_REMOTE_READ | FI_WRITE | FI_REMOTE_WRITE).
  abi::Result registerBuffer(void* data, size_t size, int ncclType, int dmabufFd,
                             uint64_t dmabufOffset, MemoryHandle** out, uint64_t extraAccess = 0);
  // Registers host memory with explicit access bits (the flush word).
  abi::Result registerHost(void* data, size_t size, uint64_t access, MemoryHandle** out);
  // `keep`: sends still refer to the handle (they fail when they see it released): its
  // registration goes now, the object itself only with the registry.
  // `deferMr`: the provider or the peer may still use it (MemoryHandle::activeUses): the
  // registration goes later, through endUse(), owe() and releaseOwed().
  abi::Result deregister(MemoryHandle* handle, bool keep = false, bool deferMr = false);
  // The deferred registration of `handle` may go now (device lock held: it is only queued).
  void owe(MemoryHandle* handle);
  // Releases what owe() queued; never with the device lock held (the registrar takes it).
  void releaseOwed();
  ~MemoryRegistry() { releaseOwed(); }

  memory::MrCacheStats stats() const { return cache_.stats(); }
  // The lock of the device the registrations belong to (the registrar's domain lock).
  fabric::DomainLock& deviceLock() { return lock_; }
  int ptrSupport() const { return ptrSupport_; }

 private:
  abi::Result acquire(const memory::Region& region, int ncclType, MemoryHandle** out);

  memory::MrCache cache_;
  fabric::DomainLock& lock_;
  const memory::CudaDriver* cuda_;
  int ptrSupport_;
  uint64_t gpuAccess_;
  bool hostDescriptors_;
  uint64_t dataAccess_;
  std::atomic<bool> dmaBufRefused_{false};  // set by the first refused DMA-BUF registration
  std::mutex keptMutex_;
  std::vector<std::unique_ptr<MemoryHandle>> kept_;
  std::vector<MemoryHandle*> owed_;  // under keptMutex_
};

// A use of `handle`'s registration that may outlive NCCL's deregistration begins or ends
// (MemoryHandle::activeUses; device lock held). The last to end after a deregistration lets the
// registration go: queued here, released by the next releaseOwed().
inline void beginUse(MemoryHandle* handle) {
  ++handle->activeUses;
}
inline void endUse(MemoryHandle* handle) {
  if (--handle->activeUses > 0 || !handle->mrOwed) return;
  handle->mrOwed = false;
  handle->registry->owe(handle);
}

}  // namespace nnf::core
