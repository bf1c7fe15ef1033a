#include "memory/cuda_driver.h"

#include <dlfcn.h>

#include <utility>

#include "config/config.h"

namespace nnf::memory {

CudaDriver::CudaDriver(const std::string& path)
    : path_(path.empty() ? NNF_CUDA_LIBRARY_NAME : path) {
  // RTLD_LOCAL: the driver's symbols must not leak into NCCL's or the application's lookups.
  library_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* error = dlerror();
    reason_ = "CUDA driver not loaded (" + std::string(error != nullptr ? error : path_) +
              "): host memory only";
    return;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(library_, "cuInit"));
  auto version = reinterpret_cast<VersionFn>(dlsym(library_, "cuDriverGetVersion"));
  pointerAttr_ = reinterpret_cast<PointerAttrFn>(dlsym(library_, "cuPointerGetAttribute"));
  // Optional: older drivers lack them, and only DMA-BUF export / the CUDA flush need them.
  getHandle_ = reinterpret_cast<GetHandleFn>(dlsym(library_, "cuMemGetHandleForAddressRange"));
  flush_ = reinterpret_cast<FlushFn>(dlsym(library_, "cuFlushGPUDirectRDMAWrites"));
  deviceGet_ = reinterpret_cast<DeviceGetFn>(dlsym(library_, "cuDeviceGet"));
  deviceAttr_ = reinterpret_cast<DeviceAttrFn>(dlsym(library_, "cuDeviceGetAttribute"));
  if (init == nullptr || version == nullptr || pointerAttr_ == nullptr) {
    reason_ =
        path_ + " lacks cuInit, cuDriverGetVersion or cuPointerGetAttribute: host memory only";
    return;
  }
  cu::Result rc = init(0);
  if (rc != cu::kSuccess) {
    reason_ = "cuInit failed with CUDA error " + std::to_string(rc) +
              (rc == cu::kErrorNoDevice ? " (no CUDA device)" : "") + ": host memory only";
    return;
  }
  if (version(&version_) != cu::kSuccess) version_ = 0;
  available_ = true;
  reason_ = "CUDA driver " + std::to_string(version_ / 1000) + "." +
            std::to_string(version_ % 1000 / 10) + " loaded from " + path_ +
            (hasDmaBufExport() ? ", DMA-BUF export" : "") + (hasFlush() ? ", GDR flush" : "");
}

CudaDriver CudaDriver::fromConfig(const config::Config& config) {
  return CudaDriver(config.string(config::Param::kCudaLibrary));
}

CudaDriver::CudaDriver(CudaDriver&& other) noexcept
    : library_(std::exchange(other.library_, nullptr)),
      available_(std::exchange(other.available_, false)),
      reason_(std::move(other.reason_)),
      path_(std::move(other.path_)),
      version_(other.version_),
      pointerAttr_(std::exchange(other.pointerAttr_, nullptr)),
      getHandle_(std::exchange(other.getHandle_, nullptr)),
      flush_(std::exchange(other.flush_, nullptr)),
      deviceGet_(std::exchange(other.deviceGet_, nullptr)),
      deviceAttr_(std::exchange(other.deviceAttr_, nullptr)) {}

CudaDriver::~CudaDriver() {
  // The driver is never unloaded: CUDA registers process-wide state (atexit handlers, threads)
  // that outlives any one user, and dlclose of libcuda is known to crash at exit.
}

cu::Result CudaDriver::pointerInfo(const void* ptr, PointerInfo* info) const {
  *info = PointerInfo{};
  if (!available_) return cu::kSuccess;  // without CUDA every pointer is host memory
  unsigned type = 0;
  auto address = reinterpret_cast<cu::DevicePtr>(ptr);
  cu::Result rc = pointerAttr_(&type, cu::kPointerAttributeMemoryType, address);
  // CUDA answers "invalid value" for memory it never saw: ordinary host memory.
  if (rc == cu::kErrorInvalidValue) return cu::kSuccess;
  if (rc != cu::kSuccess) return rc;
  if (type != cu::kMemoryTypeDevice) return cu::kSuccess;
  int ordinal = -1;
  rc = pointerAttr_(&ordinal, cu::kPointerAttributeDeviceOrdinal, address);
  if (rc != cu::kSuccess) return rc;
  info->device = true;
  info->ordinal = ordinal;
  return cu::kSuccess;
}

cu::Result CudaDriver::dmaBufFd(const void* ptr, size_t size, int* fd) const {
  if (!available_ || getHandle_ == nullptr) return cu::kErrorInvalidValue;
  return getHandle_(fd, reinterpret_cast<cu::DevicePtr>(ptr), size, cu::kRangeHandleTypeDmaBufFd,
                    0);
}

bool CudaDriver::dmaBufSupported(int ordinal) const {
  if (!available_ || getHandle_ == nullptr || deviceGet_ == nullptr || deviceAttr_ == nullptr)
    return false;
  int device = 0;
  int supported = 0;
  if (deviceGet_(&device, ordinal) != cu::kSuccess) return false;
  if (deviceAttr_(&supported, cu::kDeviceAttributeDmaBufSupported, device) != cu::kSuccess)
    return false;
  return supported != 0;
}

cu::Result CudaDriver::flushGdrWrites() const {
  if (!available_ || flush_ == nullptr) return cu::kErrorInvalidValue;
  return flush_(cu::kFlushTargetCurrentCtx, cu::kFlushToOwner);
}

}  // namespace nnf::memory
