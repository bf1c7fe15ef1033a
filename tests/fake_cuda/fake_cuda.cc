// A stand-in for libcuda.so.1 in tests: implements the driver entry points the plugin and
// libfabric's CUDA support load (the runtime's are in fake_cudart.cc, the same library) over the
// device memory of device_memory.h: host ranges declared through nnfFakeCudaDeclare, and
// allocations, which are host memory (tests/gpu's stand-in run, which must fail although
// everything looks like a GPU) or, with NNF_FAKE_CUDA_NO_CPU_ACCESS=1, memory the CPU cannot
// touch (the software EFA device's runs: a CPU copy of GPU memory anywhere faults).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "device_memory.h"

using nnf::fakecuda::g_mutex;
using nnf::fakecuda::Range;

namespace {

std::atomic<int> g_initResult{0};
std::atomic<int> g_flushes{0};
std::atomic<int> g_exports{0};
std::atomic<int> g_dmaBufSupported{1};

// Values as in cuda.h.
constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kNotInitialized = 3;
constexpr int kAttrMemoryType = 2;
constexpr int kAttrDeviceOrdinal = 9;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr int kDmaBufFd = 1;

bool g_initialized = false;

}  // namespace

// The runtime initialises the driver implicitly (fake_cudart.cc).
bool nnfFakeCudaInitImplicitly() {
  std::lock_guard<std::mutex> guard(g_mutex);
  if (g_initResult != kSuccess) return false;
  g_initialized = true;
  return true;
}

extern "C" {

// Test controls.
__attribute__((visibility("default"))) void nnfFakeCudaDeclare(void* base, size_t length,
                                                               int ordinal) {
  nnf::fakecuda::declare(base, length, ordinal);
}

__attribute__((visibility("default"))) void nnfFakeCudaReset() {
  nnf::fakecuda::reset();
  std::lock_guard<std::mutex> guard(g_mutex);
  g_initResult = 0;
  g_flushes = 0;
  g_exports = 0;
  g_dmaBufSupported = 1;
  g_initialized = false;
}

// Allocations from now on are (1) or are not (0) memory the CPU cannot touch; the default comes
// from NNF_FAKE_CUDA_NO_CPU_ACCESS.
__attribute__((visibility("default"))) void nnfFakeCudaSetNoCpuAccess(int on) {
  nnf::fakecuda::setNoCpuAccess(on != 0);
}

// For the software EFA device (tests/soft_efa), as a NIC's view of device memory: 1 and the
// alias of [pointer, pointer+length) when it is memory without CPU access, 0 when the CPU
// reaches it (host or declared memory), -1 when the span leaves the allocation it starts in.
__attribute__((visibility("default"))) int nnfFakeCudaHostAlias(const void* pointer, size_t length,
                                                                void** alias) {
  Range range;
  auto address = reinterpret_cast<uintptr_t>(pointer);
  if (!nnf::fakecuda::find(address, &range) || range.alias == 0) return 0;
  if (length > range.end - address) return -1;
  *alias = reinterpret_cast<void*>(range.alias + (address - range.start));
  return 1;
}

// Where a DMA-BUF this driver exported starts within its memfd (0 and false for others).
__attribute__((visibility("default"))) int nnfFakeCudaDmaBufStart(int fd, uint64_t* start) {
  return nnf::fakecuda::dmaBufStart(fd, start) ? 0 : -1;
}

// Makes the next cuInit return `result` (100 = CUDA_ERROR_NO_DEVICE).
__attribute__((visibility("default"))) void nnfFakeCudaSetInitResult(int result) {
  g_initResult = result;
}

// What CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED answers (1 unless told otherwise).
__attribute__((visibility("default"))) void nnfFakeCudaSetDmaBufSupported(int supported) {
  g_dmaBufSupported = supported;
}

__attribute__((visibility("default"))) int nnfFakeCudaFlushCount() {
  return g_flushes;
}
__attribute__((visibility("default"))) int nnfFakeCudaExportCount() {
  return g_exports;
}

// Driver API.
__attribute__((visibility("default"))) int cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  int result = g_initResult;
  std::lock_guard<std::mutex> guard(g_mutex);
  g_initialized = result == kSuccess;
  return result;
}

__attribute__((visibility("default"))) int cuDriverGetVersion(int* version) {
  if (version == nullptr) return kInvalidValue;
  *version = 12040;
  return kSuccess;
}

__attribute__((visibility("default"))) int cuPointerGetAttribute(void* data, int attribute,
                                                                 unsigned long long pointer) {
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    if (!g_initialized) return kNotInitialized;
  }
  Range range;
  if (!nnf::fakecuda::find(static_cast<uintptr_t>(pointer), &range))
    return kInvalidValue;  // what CUDA says for memory it never saw
  switch (attribute) {
    case kAttrMemoryType:
      *static_cast<unsigned*>(data) = kMemoryTypeDevice;
      return kSuccess;
    case kAttrDeviceOrdinal:
      *static_cast<int*>(data) = range.ordinal;
      return kSuccess;
    default:
      return kInvalidValue;
  }
}

__attribute__((visibility("default"))) int cuDeviceGet(int* device, int ordinal) {
  if (device == nullptr || ordinal < 0) return kInvalidValue;
  if (!g_initialized) return kNotInitialized;
  *device = ordinal;
  return kSuccess;
}

__attribute__((visibility("default"))) int cuDeviceGetAttribute(int* value, int attribute,
                                                                int device) {
  constexpr int kAttrDmaBufSupported = 124;
  if (value == nullptr || device < 0) return kInvalidValue;
  if (!g_initialized) return kNotInitialized;
  if (attribute != kAttrDmaBufSupported) return kInvalidValue;
  *value = g_dmaBufSupported;
  return kSuccess;
}

// Memory without CPU access exports its memfd (a DMA-BUF the software EFA device maps); declared
// host memory a real descriptor of /dev/null, so callers can close it like a DMA-BUF fd (and a
// provider that imports it fails).
__attribute__((visibility("default"))) int cuMemGetHandleForAddressRange(void* handle,
                                                                         unsigned long long pointer,
                                                                         size_t size, int type,
                                                                         unsigned long long flags) {
  if (type != kDmaBufFd || handle == nullptr) return kInvalidValue;
  Range range;
  if (!nnf::fakecuda::find(static_cast<uintptr_t>(pointer), &range) || size > range.end - pointer)
    return kInvalidValue;
  int fd = range.memfd >= 0 ? nnf::fakecuda::exportDmaBuf(pointer, size)
                            : open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kInvalidValue;
  *static_cast<int*>(handle) = fd;
  ++g_exports;
  return kSuccess;
}

__attribute__((visibility("default"))) int cuFlushGPUDirectRDMAWrites(int target, int scope) {
  if (target != 0 || (scope != 100 && scope != 200)) return kInvalidValue;
  ++g_flushes;
  return kSuccess;
}

// What tests/gpu needs besides: one device, a primary context, allocations declared as device
// memory of ordinal 0, and copies and fills that only accept such memory on the device side.
__attribute__((visibility("default"))) int cuDeviceGetCount(int* count) {
  if (count == nullptr) return kInvalidValue;
  if (!g_initialized) return kNotInitialized;
  *count = 1;
  return kSuccess;
}

__attribute__((visibility("default"))) int cuDeviceGetName(char* name, int length, int device) {
  constexpr char kName[] = "nnf stand-in CUDA device (host memory)";
  if (name == nullptr || length <= 0 || device != 0) return kInvalidValue;
  if (!g_initialized) return kNotInitialized;
  std::strncpy(name, kName, static_cast<size_t>(length) - 1);
  name[length - 1] = '\0';
  return kSuccess;
}

__attribute__((visibility("default"))) int cuDevicePrimaryCtxRetain(void** context, int device) {
  static int g_context;
  if (context == nullptr || device != 0) return kInvalidValue;
  if (!g_initialized) return kNotInitialized;
  *context = &g_context;
  return kSuccess;
}

__attribute__((visibility("default"))) int cuDevicePrimaryCtxRelease_v2(int device) {
  return device == 0 ? kSuccess : kInvalidValue;
}

__attribute__((visibility("default"))) int cuCtxSetCurrent(void* context) {
  return g_initialized ? kSuccess : kNotInitialized;
}

__attribute__((visibility("default"))) int cuCtxSynchronize() {
  return g_initialized ? kSuccess : kNotInitialized;
}

__attribute__((visibility("default"))) int cuMemAlloc_v2(unsigned long long* pointer, size_t size) {
  if (pointer == nullptr || size == 0) return kInvalidValue;
  if (!g_initialized) return kNotInitialized;
  void* memory = nnf::fakecuda::allocate(size);
  if (memory == nullptr) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  *pointer = reinterpret_cast<uintptr_t>(memory);
  return kSuccess;
}

__attribute__((visibility("default"))) int cuMemFree_v2(unsigned long long pointer) {
  return nnf::fakecuda::release(static_cast<uintptr_t>(pointer)) ? kSuccess : kInvalidValue;
}

namespace {
// Where the CPU reaches the device side of a copy or fill, which must lie in one range (as CUDA
// demands); 0 when it does not.
uintptr_t deviceSide(unsigned long long pointer, size_t size) {
  Range range;
  if (!nnf::fakecuda::find(static_cast<uintptr_t>(pointer), &range)) return 0;
  return nnf::fakecuda::cpuAddress(static_cast<uintptr_t>(pointer), size);
}
}  // namespace

__attribute__((visibility("default"))) int cuMemcpyHtoD_v2(unsigned long long device,
                                                           const void* host, size_t size) {
  uintptr_t to = deviceSide(device, size);
  if (to == 0 || host == nullptr) return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(to), host, size);
  return kSuccess;
}

__attribute__((visibility("default"))) int cuMemcpyDtoH_v2(void* host, unsigned long long device,
                                                           size_t size) {
  uintptr_t from = deviceSide(device, size);
  if (from == 0 || host == nullptr) return kInvalidValue;
  std::memcpy(host, reinterpret_cast<const void*>(from), size);
  return kSuccess;
}

__attribute__((visibility("default"))) int cuMemsetD8_v2(unsigned long long device,
                                                         unsigned char value, size_t size) {
  uintptr_t to = deviceSide(device, size);
  if (to == 0) return kInvalidValue;
  std::memset(reinterpret_cast<void*>(to), value, size);
  return kSuccess;
}

// What libfabric's CUDA support asks besides (src/hmem_cuda.c): the allocation holding a pointer,
// several attributes at once, peer access, error names.
__attribute__((visibility("default"))) int cuMemGetAddressRange(unsigned long long* base,
                                                                size_t* size,
                                                                unsigned long long pointer) {
  Range range;
  if (!nnf::fakecuda::find(static_cast<uintptr_t>(pointer), &range)) return kInvalidValue;
  if (base != nullptr) *base = range.start;
  if (size != nullptr) *size = range.end - range.start;
  return kSuccess;
}

__attribute__((visibility("default"))) int cuMemGetAddressRange_v2(unsigned long long* base,
                                                                   size_t* size,
                                                                   unsigned long long pointer) {
  return cuMemGetAddressRange(base, size, pointer);
}

__attribute__((visibility("default"))) int cuPointerGetAttributes(unsigned count,
                                                                  const int* attributes,
                                                                  void** data,
                                                                  unsigned long long pointer) {
  constexpr int kAttrIsManaged = 8;
  constexpr int kAttrSyncMemops = 6;
  for (unsigned i = 0; i < count; ++i) {
    int rc = kSuccess;
    if (attributes[i] == kAttrIsManaged || attributes[i] == kAttrSyncMemops) {
      Range range;
      rc = nnf::fakecuda::find(static_cast<uintptr_t>(pointer), &range) ? kSuccess : kInvalidValue;
      if (rc == kSuccess) *static_cast<unsigned*>(data[i]) = attributes[i] == kAttrSyncMemops;
    } else {
      rc = cuPointerGetAttribute(data[i], attributes[i], pointer);
    }
    if (rc != kSuccess) return rc;
  }
  return kSuccess;
}

__attribute__((visibility("default"))) int cuPointerSetAttribute(const void* value, int attribute,
                                                                 unsigned long long pointer) {
  Range range;
  return nnf::fakecuda::find(static_cast<uintptr_t>(pointer), &range) ? kSuccess : kInvalidValue;
}

__attribute__((visibility("default"))) int cuDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return kInvalidValue;
  *can = 1;
  return kSuccess;
}

__attribute__((visibility("default"))) int cuGetErrorName(int error, const char** text) {
  if (text == nullptr) return kInvalidValue;
  *text = error == kSuccess ? "CUDA_SUCCESS" : "CUDA_ERROR_STAND_IN";
  return kSuccess;
}

__attribute__((visibility("default"))) int cuGetErrorString(int error, const char** text) {
  if (text == nullptr) return kInvalidValue;
  *text = error == kSuccess ? "no error" : "stand-in CUDA error";
  return kSuccess;
}

}  // extern "C"
