// Violations: one report line, one stderr line, a counter; and the CUDA driver query that
// decides what device memory is.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "efa_rules.h"

namespace efa_rules {
namespace {

std::atomic<uint64_t> g_violations{0};

constexpr int kCuSuccess = 0;
constexpr int kAttrMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryDevice = 2;  // CU_MEMORYTYPE_DEVICE

using PointerGetAttribute = int (*)(void*, int, unsigned long long);

PointerGetAttribute driverQuery() {
  static std::once_flag once;
  static PointerGetAttribute query = nullptr;
  std::call_once(once, [] {
    const char* path = std::getenv("NCCL_FABRIC_CUDA_LIBRARY");
    if (path == nullptr || *path == '\0') return;
    // The same path gives the same instance the plugin (or the test) loaded.
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return;
    query = reinterpret_cast<PointerGetAttribute>(dlsym(handle, "cuPointerGetAttribute"));
  });
  return query;
}

}  // namespace

const char* ruleName(Rule rule) {
  switch (rule) {
    case Rule::kMissingDescriptor:
      return "missing-descriptor";
    case Rule::kInjectDeviceMemory:
      return "inject-device-memory";
    case Rule::kOptionAfterEnable:
      return "option-after-enable";
    case Rule::kTagFormat:
      return "tag-format";
    case Rule::kCudaApiPermitted:
      return "cuda-api-permitted";
    case Rule::kSharedMemoryRead:
      return "shared-memory-read";
    case Rule::kLl128Order:
      return "ll128-order";
    case Rule::kDmabufRange:
      return "dmabuf-range";
    case Rule::kWrongDomain:
      return "wrong-domain";
    case Rule::kRemoteKeyDomain:
      return "remote-key-domain";
    case Rule::kMixedHmemIov:
      return "mixed-hmem-iov";
    case Rule::kCqDataSize:
      return "cq-data-size";
    case Rule::kRmaSize:
      return "rma-size";
  }
  return "unknown";
}

int violation(Rule rule, const std::string& detail) {
  ++g_violations;
  std::string line = std::string(ruleName(rule)) + " " + detail + "\n";
  if (const char* path = std::getenv("NNF_EFA_RULES_REPORT"); path != nullptr && *path != '\0') {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      // One write per line, so concurrent processes never interleave within a line.
      ssize_t written = write(fd, line.data(), line.size());
      (void)written;
      close(fd);
    }
  }
  std::fprintf(stderr, "efa-rules: VIOLATION %s: %s\n", ruleName(rule), detail.c_str());
  return kProvErrnoBase + static_cast<int>(rule);
}

uint64_t violationCount() {
  return g_violations.load();
}

bool isRuleErrno(int provErrno) {
  return provErrno > kProvErrnoBase &&
         provErrno <= kProvErrnoBase + static_cast<int>(Rule::kLastRule);
}

bool driverSaysDevice(const void* p) {
  PointerGetAttribute query = driverQuery();
  if (query == nullptr || p == nullptr) return false;
  unsigned type = 0;
  // Not initialised (3) or unknown memory: host. cuInit is the caller's business.
  if (query(&type, kAttrMemoryType, reinterpret_cast<uintptr_t>(p)) != kCuSuccess) return false;
  return type == kMemoryDevice;
}

}  // namespace efa_rules
