// A stand-in for libcuda.so.1 in tests: implements the driver entry points the plugin loads and
// treats host ranges declared through nnfFakeCudaDeclare as device memory of an ordinal. It also
// allocates, fills and copies such "device memory" (host memory underneath) for tests/gpu, whose
// stand-in run must fail although everything looks like a GPU: no real provider takes it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

struct Range {
  uintptr_t start;
  uintptr_t end;
  int ordinal;
};

std::mutex g_mutex;
std::vector<Range> g_ranges;
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

const Range* find(uintptr_t address) {
  for (const Range& range : g_ranges)
    if (address >= range.start && address < range.end) return &range;
  return nullptr;
}

}  // namespace

extern "C" {

// Test controls.
__attribute__((visibility("default"))) void nnfFakeCudaDeclare(void* base, size_t length,
                                                               int ordinal) {
  std::lock_guard<std::mutex> guard(g_mutex);
  auto start = reinterpret_cast<uintptr_t>(base);
  g_ranges.push_back({start, start + length, ordinal});
}

__attribute__((visibility("default"))) void nnfFakeCudaReset() {
  std::lock_guard<std::mutex> guard(g_mutex);
  g_ranges.clear();
  g_initResult = 0;
  g_flushes = 0;
  g_exports = 0;
  g_dmaBufSupported = 1;
  g_initialized = false;
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
  std::lock_guard<std::mutex> guard(g_mutex);
  if (!g_initialized) return kNotInitialized;
  const Range* range = find(static_cast<uintptr_t>(pointer));
  if (range == nullptr) return kInvalidValue;  // what CUDA says for memory it never saw
  switch (attribute) {
    case kAttrMemoryType:
      *static_cast<unsigned*>(data) = kMemoryTypeDevice;
      return kSuccess;
    case kAttrDeviceOrdinal:
      *static_cast<int*>(data) = range->ordinal;
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

// Hands out a real descriptor (of /dev/null) so callers can close it like a DMA-BUF fd.
__attribute__((visibility("default"))) int cuMemGetHandleForAddressRange(void* handle,
                                                                         unsigned long long pointer,
                                                                         size_t size, int type,
                                                                         unsigned long long flags) {
  std::lock_guard<std::mutex> guard(g_mutex);
  if (type != kDmaBufFd || handle == nullptr) return kInvalidValue;
  const Range* range = find(static_cast<uintptr_t>(pointer));
  if (range == nullptr || pointer + size > range->end) return kInvalidValue;
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
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
  size_t rounded = (size + 4095) / 4096 * 4096;
  void* memory = std::aligned_alloc(4096, rounded);
  if (memory == nullptr) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  nnfFakeCudaDeclare(memory, rounded, 0);
  *pointer = reinterpret_cast<uintptr_t>(memory);
  return kSuccess;
}

__attribute__((visibility("default"))) int cuMemFree_v2(unsigned long long pointer) {
  std::lock_guard<std::mutex> guard(g_mutex);
  auto start = static_cast<uintptr_t>(pointer);
  auto found = std::find_if(g_ranges.begin(), g_ranges.end(),
                            [start](const Range& range) { return range.start == start; });
  if (found == g_ranges.end()) return kInvalidValue;
  g_ranges.erase(found);
  std::free(reinterpret_cast<void*>(start));
  return kSuccess;
}

namespace {
// The device side of a copy or fill must lie in one declared range, as CUDA demands.
bool deviceRange(unsigned long long pointer, size_t size) {
  std::lock_guard<std::mutex> guard(g_mutex);
  const Range* range = find(static_cast<uintptr_t>(pointer));
  return range != nullptr && pointer + size <= range->end;
}
}  // namespace

__attribute__((visibility("default"))) int cuMemcpyHtoD_v2(unsigned long long device,
                                                           const void* host, size_t size) {
  if (!deviceRange(device, size) || host == nullptr) return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(device)), host, size);
  return kSuccess;
}

__attribute__((visibility("default"))) int cuMemcpyDtoH_v2(void* host, unsigned long long device,
                                                           size_t size) {
  if (!deviceRange(device, size) || host == nullptr) return kInvalidValue;
  std::memcpy(host, reinterpret_cast<const void*>(static_cast<uintptr_t>(device)), size);
  return kSuccess;
}

__attribute__((visibility("default"))) int cuMemsetD8_v2(unsigned long long device,
                                                         unsigned char value, size_t size) {
  if (!deviceRange(device, size)) return kInvalidValue;
  std::memset(reinterpret_cast<void*>(static_cast<uintptr_t>(device)), value, size);
  return kSuccess;
}

__attribute__((visibility("default"))) int cuGetErrorString(int error, const char** text) {
  if (text == nullptr) return kInvalidValue;
  *text = error == kSuccess ? "no error" : "stand-in CUDA error";
  return kSuccess;
}

}  // extern "C"
