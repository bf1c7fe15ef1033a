// The CUDA runtime calls libfabric's CUDA support dlopens from libcudart.so (src/hmem_cuda.c),
// over the fake driver's device memory: a copy reaches memory without CPU access through its
// alias, as a DMA engine would. Like the real runtime, the first call initialises the driver.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "device_memory.h"

bool nnfFakeCudaInitImplicitly();

namespace {

// cudaError_t values as in driver_types.h.
constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kMemoryAllocation = 2;
constexpr int kNoDevice = 100;
constexpr int kInvalidDevice = 101;
constexpr int kNotSupported = 801;

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cudaGetDeviceCount(int* count) {
  if (count == nullptr) return kInvalidValue;
  if (!nnfFakeCudaInitImplicitly()) return kNoDevice;
  *count = 1;
  return kSuccess;
}

__attribute__((visibility("default"))) int cudaGetDevice(int* device) {
  if (device == nullptr) return kInvalidValue;
  if (!nnfFakeCudaInitImplicitly()) return kNoDevice;
  *device = 0;
  return kSuccess;
}

__attribute__((visibility("default"))) int cudaSetDevice(int device) {
  if (!nnfFakeCudaInitImplicitly()) return kNoDevice;
  return device == 0 ? kSuccess : kInvalidDevice;
}

__attribute__((visibility("default"))) int cudaDeviceSynchronize() {
  return nnfFakeCudaInitImplicitly() ? kSuccess : kNoDevice;
}

__attribute__((visibility("default"))) int cudaMalloc(void** pointer, size_t size) {
  if (pointer == nullptr || size == 0) return kInvalidValue;
  if (!nnfFakeCudaInitImplicitly()) return kNoDevice;
  void* memory = nnf::fakecuda::allocate(size);
  if (memory == nullptr) return kMemoryAllocation;
  *pointer = memory;
  return kSuccess;
}

__attribute__((visibility("default"))) int cudaFree(void* pointer) {
  if (pointer == nullptr) return kSuccess;
  return nnf::fakecuda::release(reinterpret_cast<uintptr_t>(pointer)) ? kSuccess : kInvalidValue;
}

// Any direction (cudaMemcpyDefault included): each side is device memory of this driver or host
// memory.
__attribute__((visibility("default"))) int cudaMemcpy(void* to, const void* from, size_t size,
                                                      int kind) {
  if (size == 0) return kSuccess;
  uintptr_t dst = nnf::fakecuda::cpuAddress(reinterpret_cast<uintptr_t>(to), size);
  uintptr_t src = nnf::fakecuda::cpuAddress(reinterpret_cast<uintptr_t>(from), size);
  if (dst == 0 || src == 0 || kind < 0 || kind > 4) return kInvalidValue;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), size);
  return kSuccess;
}

__attribute__((visibility("default"))) int cudaHostRegister(void*, size_t, unsigned) {
  return kSuccess;
}

__attribute__((visibility("default"))) int cudaHostUnregister(void*) {
  return kSuccess;
}

// No CUDA IPC: shared-memory transports between processes cannot map this memory.
__attribute__((visibility("default"))) int cudaIpcGetMemHandle(void*, void*) {
  return kNotSupported;
}

struct IpcMemHandle {
  char reserved[64];  // cudaIpcMemHandle_t, passed by value
};

__attribute__((visibility("default"))) int cudaIpcOpenMemHandle(void**, IpcMemHandle, unsigned) {
  return kNotSupported;
}

__attribute__((visibility("default"))) int cudaIpcCloseMemHandle(void*) {
  return kNotSupported;
}

__attribute__((visibility("default"))) const char* cudaGetErrorName(int error) {
  return error == kSuccess ? "cudaSuccess" : "cudaErrorStandIn";
}

__attribute__((visibility("default"))) const char* cudaGetErrorString(int error) {
  return error == kSuccess ? "no error" : "stand-in CUDA runtime error";
}

}  // extern "C"
