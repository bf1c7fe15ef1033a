// The few CUDA driver entry points the plugin needs, loaded with dlopen at run time so that the
// library loads and works on machines without CUDA (ptrSupport is then host memory only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nnf::config {
class Config;
}

namespace nnf::memory {

// Values from the CUDA driver API (cuda.h); declared here so that no CUDA header is needed.
namespace cu {
using Result = int;
using DevicePtr = unsigned long long;
constexpr Result kSuccess = 0;
constexpr Result kErrorInvalidValue = 1;
constexpr Result kErrorNoDevice = 100;
constexpr int kPointerAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kPointerAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeHost = 1;            // CU_MEMORYTYPE_HOST
constexpr unsigned kMemoryTypeDevice = 2;          // CU_MEMORYTYPE_DEVICE
constexpr int kRangeHandleTypeDmaBufFd = 1;        // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
constexpr int kFlushTargetCurrentCtx = 0;  // CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX
constexpr int kFlushToOwner = 100;         // CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER
constexpr int kDeviceAttributeDmaBufSupported = 124;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
}  // namespace cu

struct PointerInfo {
  bool device = false;  // CUDA device memory
  int ordinal = -1;     // its device ordinal, -1 for host memory
};

class CudaDriver {
 public:
  // Loads `path`, or NNF_CUDA_LIBRARY_NAME when empty, and calls cuInit(0). Never throws:
  // failure leaves available() false with reason() saying why.
  explicit CudaDriver(const std::string& path = "");
  static CudaDriver fromConfig(const config::Config& config);
  ~CudaDriver();
  CudaDriver(CudaDriver&& other) noexcept;
  CudaDriver& operator=(CudaDriver&&) = delete;
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  bool available() const { return available_; }
  // One line for an INFO message: what was loaded (driver version) or why CUDA is unusable.
  const std::string& reason() const { return reason_; }
  const std::string& path() const { return path_; }
  int driverVersion() const { return version_; }  // e.g. 12040; 0 when unavailable
  bool hasDmaBufExport() const { return getHandle_ != nullptr; }
  bool hasFlush() const { return flush_ != nullptr; }
  // Whether device `ordinal` reports DMA-BUF support (false when the driver cannot say).
  bool dmaBufSupported(int ordinal) const;

  // Classifies a pointer. Memory CUDA does not know (plain malloc) is host memory; 0 or the
  // driver's error code.
  cu::Result pointerInfo(const void* ptr, PointerInfo* info) const;
  // Exports [ptr, ptr+size) of device memory as a DMA-BUF; the caller closes *fd.
  cu::Result dmaBufFd(const void* ptr, size_t size, int* fd) const;
  // Makes completed GPUDirect RDMA writes visible to the current context's device.
  cu::Result flushGdrWrites() const;

 private:
  using InitFn = cu::Result (*)(unsigned);
  using VersionFn = cu::Result (*)(int*);
  using PointerAttrFn = cu::Result (*)(void*, int, cu::DevicePtr);
  using GetHandleFn = cu::Result (*)(void*, cu::DevicePtr, size_t, int, unsigned long long);
  using FlushFn = cu::Result (*)(int, int);
  using DeviceGetFn = cu::Result (*)(int*, int);
  using DeviceAttrFn = cu::Result (*)(int*, int, int);

  void* library_ = nullptr;
  bool available_ = false;
  std::string reason_;
  std::string path_;
  int version_ = 0;
  PointerAttrFn pointerAttr_ = nullptr;
  GetHandleFn getHandle_ = nullptr;
  FlushFn flush_ = nullptr;
  DeviceGetFn deviceGet_ = nullptr;
  DeviceAttrFn deviceAttr_ = nullptr;
};

}  // namespace nnf::memory
