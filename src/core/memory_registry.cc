#include "core/memory_registry.h"

#include <rdma/fabric.h>

#include "fabric/fid.h"
#include "log/log.h"

namespace nnf::core {
namespace {

const char* ncclTypeName(int type) {
  switch (type) {
    case abi::kPtrHost:
      return "host";
    case abi::kPtrCuda:
      return "cuda";
    case abi::kPtrDmaBuf:
      return "dmabuf";
    default:
      return "unknown";
  }
}

}  // namespace

MemoryRegistry::MemoryRegistry(memory::Registrar& registrar, fabric::DomainLock& lock,
                               const memory::MrCacheOptions& options,
                               const memory::CudaDriver* cuda, int ptrSupport, uint64_t gpuAccess,
                               bool hostDescriptors, uint64_t dataAccess)
    : cache_(registrar, options),
      lock_(lock),
      cuda_(cuda),
      ptrSupport_(ptrSupport),
      gpuAccess_(gpuAccess),
      hostDescriptors_(hostDescriptors),
      dataAccess_(dataAccess) {}

abi::Result MemoryRegistry::registerBuffer(void* data, size_t size, int ncclType, int dmabufFd,
                                           uint64_t dmabufOffset, MemoryHandle** out,
                                           uint64_t extraAccess) {
  if ((ncclType & ptrSupport_) == 0 ||
      (ncclType != abi::kPtrHost && ncclType != abi::kPtrCuda && ncclType != abi::kPtrDmaBuf)) {
    NNF_WARN("regMr: %s memory at %p (%zu bytes) is not supported by this device (ptrSupport=%d)",
             ncclTypeName(ncclType), data, size, ptrSupport_);
    return abi::kInternalError;
  }
  memory::Region region;
  region.base = data;
  region.length = size;
  region.access = FI_SEND | FI_RECV | dataAccess_ | extraAccess;
  if (ncclType != abi::kPtrHost) {
    memory::PointerInfo info;
    if (cuda_ == nullptr || cuda_->pointerInfo(data, &info) != 0 || !info.device) {
      NNF_WARN(
          "regMr: %p (%zu bytes) was given as %s memory but CUDA does not know it as device"
          " memory",
          data, size, ncclTypeName(ncclType));
      return abi::kInternalError;
    }
    region.device = info.ordinal;
    region.access |= gpuAccess_;
    region.type = memory::MemType::kCuda;
    // NCCL passes CUDA buffers with a DMA-BUF fd as NCCL_PTR_CUDA: use the fd when we can.
    if (!dmaBufRefused_ && dmabufFd >= 0 &&
        (ncclType == abi::kPtrDmaBuf || (ptrSupport_ & abi::kPtrDmaBuf) != 0)) {
      memory::Region viaFd = region;
      viaFd.type = memory::MemType::kDmaBuf;
      viaFd.dmabufFd = dmabufFd;
      viaFd.dmabufOffset = dmabufOffset;
      abi::Result result = acquire(viaFd, ncclType, out);
      if (result != abi::kSystemError) return result;
      // The provider or the kernel cannot import it (the probe cannot see every reason): the
      // same memory registers by address, so fall back once and for good.
      dmaBufRefused_ = true;
      NNF_WARN(
          "DMA-BUF registration refused by the provider (%p, %zu bytes); registering GPU memory "
          "by address from now on",
          data, size);
    }
  }
  return acquire(region, ncclType, out);
}

abi::Result MemoryRegistry::registerHost(void* data, size_t size, uint64_t access,
                                         MemoryHandle** out) {
  memory::Region region;
  region.base = data;
  region.length = size;
  region.access = access;
  return acquire(region, abi::kPtrHost, out);
}

abi::Result MemoryRegistry::acquire(const memory::Region& region, int ncclType,
                                    MemoryHandle** out) {
  auto handle = std::make_unique<MemoryHandle>();
  handle->ncclType = ncclType;
  handle->type = region.type;
  handle->registry = this;
  handle->base = region.base;
  handle->length = region.length;
  if (region.length > 0) {
    // The registrar has already logged the provider's refusal with its error text.
    int ret = cache_.acquire(region, &handle->mr);
    if (ret != 0) return ret == -FI_EINVAL ? abi::kInternalError : abi::kSystemError;
    if (hostDescriptors_ || region.type != memory::MemType::kHost) {
      handle->desc = handle->mr->registration().desc;
    }
  }
  *out = handle.release();
  return abi::kSuccess;
}

abi::Result MemoryRegistry::deregister(MemoryHandle* handle, bool keep, bool deferMr) {
  abi::Result result = abi::kSuccess;
  handle->magic = 0;
  if (!deferMr) {
    if (handle->mr != nullptr && cache_.release(handle->mr) != 0) result = abi::kInternalError;
    handle->mr = nullptr;
    handle->desc = nullptr;
  }
  if (keep) {
    std::lock_guard<std::mutex> lock(keptMutex_);
    kept_.emplace_back(handle);
  } else {
    delete handle;
  }
  return result;
}

void MemoryRegistry::owe(MemoryHandle* handle) {
  std::lock_guard<std::mutex> lock(keptMutex_);
  owed_.push_back(handle);
}

void MemoryRegistry::releaseOwed() {
  std::vector<MemoryHandle*> owed;
  {
    std::lock_guard<std::mutex> lock(keptMutex_);
    owed.swap(owed_);
  }
  for (MemoryHandle* handle : owed) {
    if (handle->mr != nullptr) cache_.release(handle->mr);
    handle->mr = nullptr;
    handle->desc = nullptr;
  }
}

}  // namespace nnf::core
