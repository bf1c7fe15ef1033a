// The CUDA driver calls the GPU check needs beyond what the plugin loads: allocate device memory,
// fill it, copy it back. Loaded at run time from libcuda.so.1 by name, so that the check, the
// plugin and the EFA-rules provider share one driver instance (and no CUDA runtime or kernel is
// needed). Only ever used in forked children: a process that initialised CUDA must not fork.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nnf::test::gpu {

class CudaApi {
 public:
  // Loads the driver, resolves every entry point, calls cuInit and makes the primary context of
  // `ordinal` current in this thread. False with the reason in `error()` otherwise.
  bool open(int ordinal = 0);
  const std::string& error() const { return error_; }
  // Where libcuda.so.1 was loaded from, the driver version and the device's name, for reports.
  const std::string& libraryPath() const { return path_; }
  int driverVersion() const { return driverVersion_; }
  int deviceCount() const { return deviceCount_; }
  const std::string& deviceName() const { return deviceName_; }

  // Each returns the CUDA result (0 on success); describe() turns one into text.
  int alloc(size_t size, uint64_t* pointer) const;
  int free(uint64_t pointer) const;
  int copyToDevice(uint64_t device, const void* host, size_t size) const;
  int copyToHost(void* host, uint64_t device, size_t size) const;
  int set(uint64_t device, uint8_t value, size_t size) const;
  int synchronize() const;
  // Whether the driver calls `pointer` device memory (CU_POINTER_ATTRIBUTE_MEMORY_TYPE).
  bool isDeviceMemory(uint64_t pointer) const;
  std::string describe(int result) const;

 private:
  template <typename F>
  bool resolve(F* slot, const char* name);

  std::string error_;
  std::string path_;
  int driverVersion_ = 0;
  int deviceCount_ = 0;
  std::string deviceName_;
  void* library_ = nullptr;
  int (*init_)(unsigned) = nullptr;
  int (*driverGetVersion_)(int*) = nullptr;
  int (*deviceGetCount_)(int*) = nullptr;
  int (*deviceGet_)(int*, int) = nullptr;
  int (*deviceGetName_)(char*, int, int) = nullptr;
  int (*primaryCtxRetain_)(void**, int) = nullptr;
  int (*ctxSetCurrent_)(void*) = nullptr;
  int (*ctxSynchronize_)() = nullptr;
  int (*memAlloc_)(unsigned long long*, size_t) = nullptr;
  int (*memFree_)(unsigned long long) = nullptr;
  int (*memcpyHtoD_)(unsigned long long, const void*, size_t) = nullptr;
  int (*memcpyDtoH_)(void*, unsigned long long, size_t) = nullptr;
  int (*memsetD8_)(unsigned long long, unsigned char, size_t) = nullptr;
  int (*pointerGetAttribute_)(void*, int, unsigned long long) = nullptr;
  int (*getErrorString_)(int, const char**) = nullptr;
};

// One device allocation, freed on destruction; its bytes reach the host only through the driver.
class DeviceBuffer {
 public:
  DeviceBuffer(const CudaApi& cuda, size_t size);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // 0 when the allocation failed (result() says why).
  uint64_t address() const { return address_; }
  void* at(size_t offset) const { return reinterpret_cast<void*>(address_ + offset); }
  size_t size() const { return size_; }
  int result() const { return result_; }

  // [offset, offset + length) gets message `message`'s pattern (tests/support/patterns.h).
  int fillPattern(size_t offset, size_t length, uint64_t message) const;
  int fillByte(size_t offset, size_t length, uint8_t value) const;
  int read(size_t offset, size_t length, std::vector<uint8_t>* out) const;

 private:
  const CudaApi& cuda_;
  size_t size_;
  uint64_t address_ = 0;
  int result_ = 0;
};

}  // namespace nnf::test::gpu
