#include "gpu/cuda_api.h"

#include <dlfcn.h>
#include <link.h>

#include "support/patterns.h"

namespace nnf::test::gpu {
namespace {

constexpr int kAttrMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryDevice = 2;  // CU_MEMORYTYPE_DEVICE

}  // namespace

template <typename F>
bool CudaApi::resolve(F* slot, const char* name) {
  *slot = reinterpret_cast<F>(dlsym(library_, name));
  if (*slot == nullptr && error_.empty())
    error_ = path_ + " has no " + name + ": not NVIDIA's CUDA driver (a stand-in?)";
  return *slot != nullptr;
}

bool CudaApi::open(int ordinal) {
  error_.clear();
  // By name, as the plugin loads it: the instance the plugin and the provider use.
  library_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* why = dlerror();
    error_ = std::string("cannot load libcuda.so.1 (no NVIDIA driver here?): ") +
             (why != nullptr ? why : "unknown error");
    return false;
  }
  link_map* map = nullptr;
  path_ =
      dlinfo(library_, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr ? map->l_name : "libcuda.so.1";
  bool all = resolve(&init_, "cuInit");
  all = resolve(&driverGetVersion_, "cuDriverGetVersion") && all;
  all = resolve(&deviceGetCount_, "cuDeviceGetCount") && all;
  all = resolve(&deviceGet_, "cuDeviceGet") && all;
  all = resolve(&deviceGetName_, "cuDeviceGetName") && all;
  all = resolve(&primaryCtxRetain_, "cuDevicePrimaryCtxRetain") && all;
  all = resolve(&ctxSetCurrent_, "cuCtxSetCurrent") && all;
  all = resolve(&ctxSynchronize_, "cuCtxSynchronize") && all;
  all = resolve(&memAlloc_, "cuMemAlloc_v2") && all;
  all = resolve(&memFree_, "cuMemFree_v2") && all;
  all = resolve(&memcpyHtoD_, "cuMemcpyHtoD_v2") && all;
  all = resolve(&memcpyDtoH_, "cuMemcpyDtoH_v2") && all;
  all = resolve(&memsetD8_, "cuMemsetD8_v2") && all;
  all = resolve(&pointerGetAttribute_, "cuPointerGetAttribute") && all;
  getErrorString_ =
      reinterpret_cast<decltype(getErrorString_)>(dlsym(library_, "cuGetErrorString"));
  if (!all) return false;
  int result = init_(0);
  if (result != 0) {
    error_ = "cuInit failed: " + describe(result) + " (no usable GPU?)";
    return false;
  }
  driverGetVersion_(&driverVersion_);
  result = deviceGetCount_(&deviceCount_);
  if (result != 0 || deviceCount_ <= ordinal) {
    error_ = "the driver sees " + std::to_string(deviceCount_) + " GPU(s), need ordinal " +
             std::to_string(ordinal) + (result != 0 ? ": " + describe(result) : "");
    return false;
  }
  int device = 0;
  void* context = nullptr;
  char name[256] = {};
  if ((result = deviceGet_(&device, ordinal)) != 0 ||
      (result = deviceGetName_(name, sizeof(name), device)) != 0 ||
      (result = primaryCtxRetain_(&context, device)) != 0 ||
      (result = ctxSetCurrent_(context)) != 0) {
    error_ = "making GPU " + std::to_string(ordinal) +
             "'s primary context current failed: " + describe(result);
    return false;
  }
  deviceName_ = name;
  return true;
}

std::string CudaApi::describe(int result) const {
  const char* text = nullptr;
  if (getErrorString_ != nullptr) getErrorString_(result, &text);
  return "CUDA error " + std::to_string(result) +
         (text != nullptr ? std::string(" (") + text + ")" : "");
}

int CudaApi::alloc(size_t size, uint64_t* pointer) const {
  unsigned long long address = 0;
  int result = memAlloc_(&address, size);
  *pointer = result == 0 ? address : 0;
  return result;
}

int CudaApi::free(uint64_t pointer) const {
  return memFree_(pointer);
}

int CudaApi::copyToDevice(uint64_t device, const void* host, size_t size) const {
  return size == 0 ? 0 : memcpyHtoD_(device, host, size);
}

int CudaApi::copyToHost(void* host, uint64_t device, size_t size) const {
  return size == 0 ? 0 : memcpyDtoH_(host, device, size);
}

int CudaApi::set(uint64_t device, uint8_t value, size_t size) const {
  if (size == 0) return 0;
  int result = memsetD8_(device, value, size);
  // cuMemsetD8 may return before the bytes are written; a provider's copy must come after.
  return result != 0 ? result : synchronize();
}

int CudaApi::synchronize() const {
  return ctxSynchronize_();
}

bool CudaApi::isDeviceMemory(uint64_t pointer) const {
  unsigned type = 0;
  return pointerGetAttribute_(&type, kAttrMemoryType, pointer) == 0 && type == kMemoryDevice;
}

DeviceBuffer::DeviceBuffer(const CudaApi& cuda, size_t size) : cuda_(cuda), size_(size) {
  result_ = cuda_.alloc(size, &address_);
}

DeviceBuffer::~DeviceBuffer() {
  if (address_ != 0) cuda_.free(address_);
}

int DeviceBuffer::fillPattern(size_t offset, size_t length, uint64_t message) const {
  // The pattern of [offset, offset + length) as a message that starts at `offset`.
  std::vector<uint8_t> host(length);
  nnf::test::fillPattern(host.data(), length, message);
  return cuda_.copyToDevice(address_ + offset, host.data(), length);
}

int DeviceBuffer::fillByte(size_t offset, size_t length, uint8_t value) const {
  return cuda_.set(address_ + offset, value, length);
}

int DeviceBuffer::read(size_t offset, size_t length, std::vector<uint8_t>* out) const {
  out->assign(length, 0);
  return cuda_.copyToHost(out->data(), address_ + offset, length);
}

}  // namespace nnf::test::gpu
