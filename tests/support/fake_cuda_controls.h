// The fake CUDA driver (tests/fake_cuda) as the plugin loaded it, seen from a test's child
// process: declares host ranges to be device memory and counts GPUDirect flush calls.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <string>

#include <gtest/gtest.h>

namespace nnf::test {

struct FakeControls {
  void* library = nullptr;
  void (*declare)(void*, size_t, int) = nullptr;
  int (*flushCount)() = nullptr;
  // The driver's own allocation and copies (memory without CPU access on softefa: the tests
  // fill and check it only through these).
  int (*memAlloc)(unsigned long long*, size_t) = nullptr;
  int (*memFree)(unsigned long long) = nullptr;
  int (*copyToDevice)(unsigned long long, const void*, size_t) = nullptr;
  int (*copyFromDevice)(void*, unsigned long long, size_t) = nullptr;
  int (*exportDmaBuf)(void*, unsigned long long, size_t, int, unsigned long long) = nullptr;
};

// RTLD_NOLOAD: succeeds only if the plugin has already loaded `path` (same instance).
inline void openFake(const std::string& path, FakeControls* fake) {
  fake->library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(fake->library, nullptr) << "the plugin did not load " << path;
  fake->declare =
      reinterpret_cast<decltype(fake->declare)>(dlsym(fake->library, "nnfFakeCudaDeclare"));
  fake->flushCount =
      reinterpret_cast<decltype(fake->flushCount)>(dlsym(fake->library, "nnfFakeCudaFlushCount"));
  fake->memAlloc =
      reinterpret_cast<decltype(fake->memAlloc)>(dlsym(fake->library, "cuMemAlloc_v2"));
  fake->memFree = reinterpret_cast<decltype(fake->memFree)>(dlsym(fake->library, "cuMemFree_v2"));
  fake->copyToDevice =
      reinterpret_cast<decltype(fake->copyToDevice)>(dlsym(fake->library, "cuMemcpyHtoD_v2"));
  fake->copyFromDevice =
      reinterpret_cast<decltype(fake->copyFromDevice)>(dlsym(fake->library, "cuMemcpyDtoH_v2"));
  fake->exportDmaBuf = reinterpret_cast<decltype(fake->exportDmaBuf)>(
      dlsym(fake->library, "cuMemGetHandleForAddressRange"));
  ASSERT_NE(fake->declare, nullptr);
  ASSERT_NE(fake->flushCount, nullptr);
}

}  // namespace nnf::test
