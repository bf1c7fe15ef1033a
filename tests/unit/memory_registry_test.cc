// MemoryRegistry (NCCL buffer type + pointer -> Region -> MrCache -> Registrar) with the fake CUDA
// driver: what reaches the registrar for host and CUDA buffers (memory type, device ordinal,
// access bits), the errors (undeclared CUDA pointer, type outside ptrSupport, registrar refusal),
// and the cache's hit/miss counts, including a re-registration-heavy run whose hit rate is
// reported. One suite registers through a real shm domain to check the provider's refusal of
// FI_HMEM_CUDA memory and its single WARN.
#include "core/memory_registry.h"

#include <dlfcn.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "support/test_env.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "log/log.h"
#include "memory/fabric_registrar.h"
#include "support/recording_registrar.h"

namespace nnf::core {
namespace {

using memory::MemType;
using test::RecordingRegistrar;

// --- WARN capture ------------------------------------------------------------------------------

std::mutex g_logMutex;
std::vector<std::string> g_warnings;

void captureLogger(abi::LogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != abi::kLogWarn) return;
  char text[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  std::lock_guard<std::mutex> guard(g_logMutex);
  g_warnings.emplace_back(text);
}

std::vector<std::string> takeWarnings() {
  std::lock_guard<std::mutex> guard(g_logMutex);
  std::vector<std::string> out;
  out.swap(g_warnings);
  return out;
}

std::string hexPointer(const void* ptr) {
  char text[32];
  snprintf(text, sizeof(text), "%p", ptr);
  return text;
}

// --- The fake CUDA driver ----------------------------------------------------------------------

std::string fakeCudaPath() {
  return test::fakeCudaLibrary();
}

struct FakeCuda {
  void* library = nullptr;
  void (*declare)(void*, size_t, int) = nullptr;
  void (*reset)() = nullptr;

  bool load(std::string* why) {
    std::string path = fakeCudaPath();
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      *why = "cannot load the fake CUDA driver " + path +
             " (build target nnf_fake_cuda): " + dlerror();
      return false;
    }
    declare = reinterpret_cast<decltype(declare)>(dlsym(library, "nnfFakeCudaDeclare"));
    reset = reinterpret_cast<decltype(reset)>(dlsym(library, "nnfFakeCudaReset"));
    if (declare == nullptr || reset == nullptr) {
      *why = path + " lacks the nnfFakeCuda* controls";
      return false;
    }
    return true;
  }
  ~FakeCuda() {
    if (library != nullptr) dlclose(library);
  }
};

// Page-aligned host memory that the fake driver may call device memory.
class Buffer {
 public:
  explicit Buffer(size_t size) : size_(size) {
    long page = sysconf(_SC_PAGESIZE);
    data_ = static_cast<char*>(std::aligned_alloc(static_cast<size_t>(page), size));
    memset(data_, 0, size);
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_;
  size_t size_;
};

constexpr size_t kPage = 4096;
constexpr uint64_t kBaseAccess = FI_SEND | FI_RECV;

class MemoryRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sysconf(_SC_PAGESIZE), static_cast<long>(kPage)) << "tests assume 4 KiB pages";
    std::string why;
    ASSERT_TRUE(fake_.load(&why)) << why;
    fake_.reset();  // before the driver's cuInit, which the reset would undo
    cuda_ = std::make_unique<memory::CudaDriver>(fakeCudaPath());
    ASSERT_TRUE(cuda_->available()) << cuda_->reason();
    log::setLogger(captureLogger);
    takeWarnings();
  }
  void TearDown() override {
    fake_.reset();
    log::setLogger(nullptr);
  }

  std::unique_ptr<MemoryRegistry> makeRegistry(int ptrSupport, uint64_t gpuAccess,
                                               memory::MrCacheOptions options = {},
                                               bool withCuda = true) {
    options.pageSize = kPage;
    return std::make_unique<MemoryRegistry>(
        recorder_, lock_, options, withCuda ? cuda_.get() : nullptr, ptrSupport, gpuAccess);
  }

  FakeCuda fake_;
  std::unique_ptr<memory::CudaDriver> cuda_;
  RecordingRegistrar recorder_;
  nnf::fabric::DomainLock lock_;
};

TEST_F(MemoryRegistryTest, HostBufferReachesRegistrarAsHostMemoryWithSendRecvAccess) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  EXPECT_EQ(registry->ptrSupport(), abi::kPtrHost | abi::kPtrCuda);
  Buffer buffer(16 * kPage);
  MemoryHandle* handle = nullptr;
  ASSERT_EQ(registry->registerBuffer(buffer.data(), buffer.size(), abi::kPtrHost, -1, 0, &handle),
            abi::kSuccess);
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ(handle->magic, MemoryHandle::kMagic);
  EXPECT_EQ(handle->ncclType, abi::kPtrHost);
  EXPECT_EQ(handle->type, MemType::kHost);
  EXPECT_EQ(handle->registry, registry.get());
  EXPECT_EQ(handle->base, buffer.data());
  EXPECT_EQ(handle->length, buffer.size());
  ASSERT_NE(handle->mr, nullptr);
  // The recording registrar's first fake registration: desc 0x1001, key 1.
  EXPECT_EQ(handle->desc, reinterpret_cast<void*>(0x1001));
  EXPECT_EQ(handle->key(), 1u);
  EXPECT_EQ(handle->remoteAddress(buffer.data() + 100),
            reinterpret_cast<uint64_t>(buffer.data()) + 100);

  auto calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(calls[0].registration);
  EXPECT_EQ(calls[0].base, buffer.data());
  EXPECT_EQ(calls[0].length, buffer.size());
  EXPECT_EQ(calls[0].type, MemType::kHost);
  EXPECT_EQ(calls[0].device, -1);
  EXPECT_EQ(calls[0].access, kBaseAccess) << "host buffers get no GPU flush access";
  EXPECT_EQ(calls[0].result, 0);

  EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
  calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_FALSE(calls[1].registration);
  EXPECT_EQ(calls[1].base, buffer.data());
  EXPECT_EQ(recorder_.live(), 0);
  EXPECT_TRUE(takeWarnings().empty());
}

TEST_F(MemoryRegistryTest, CudaBufferCarriesItsOrdinalAndTheGpuAccessBits) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  Buffer gpu1(8 * kPage), gpu5(4 * kPage);
  fake_.declare(gpu1.data(), gpu1.size(), 1);
  fake_.declare(gpu5.data(), gpu5.size(), 5);
  MemoryHandle *h1 = nullptr, *h5 = nullptr;
  ASSERT_EQ(registry->registerBuffer(gpu1.data(), gpu1.size(), abi::kPtrCuda, -1, 0, &h1),
            abi::kSuccess);
  ASSERT_EQ(registry->registerBuffer(gpu5.data(), gpu5.size(), abi::kPtrCuda, -1, 0, &h5),
            abi::kSuccess);
  EXPECT_EQ(h1->type, MemType::kCuda);
  EXPECT_EQ(h1->ncclType, abi::kPtrCuda);
  EXPECT_EQ(h1->mr->device(), 1);
  EXPECT_EQ(h5->mr->device(), 5);

  auto calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].type, MemType::kCuda);
  EXPECT_EQ(calls[0].device, 1);
  EXPECT_EQ(calls[0].base, gpu1.data());
  EXPECT_EQ(calls[0].length, gpu1.size());
  EXPECT_EQ(calls[0].access, kBaseAccess | FI_REMOTE_READ);
  EXPECT_EQ(calls[1].type, MemType::kCuda);
  EXPECT_EQ(calls[1].device, 5);
  EXPECT_EQ(calls[1].access, kBaseAccess | FI_REMOTE_READ);
  EXPECT_EQ(registry->deregister(h1), abi::kSuccess);
  EXPECT_EQ(registry->deregister(h5), abi::kSuccess);
  EXPECT_EQ(recorder_.live(), 0);
}

TEST_F(MemoryRegistryTest, WithoutFlushReadsCudaBuffersGetOnlySendRecvAccess) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, 0);
  Buffer gpu(4 * kPage);
  fake_.declare(gpu.data(), gpu.size(), 0);
  MemoryHandle* handle = nullptr;
  ASSERT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, -1, 0, &handle),
            abi::kSuccess);
  auto calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].type, MemType::kCuda);
  EXPECT_EQ(calls[0].device, 0);
  EXPECT_EQ(calls[0].access, kBaseAccess);
  EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
}

TEST_F(MemoryRegistryTest, DmaBufTypeRegistersAsDmaBufOfTheBuffersOrdinal) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda | abi::kPtrDmaBuf, FI_REMOTE_READ);
  Buffer gpu(4 * kPage);
  fake_.declare(gpu.data(), gpu.size(), 7);
  MemoryHandle* handle = nullptr;
  ASSERT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrDmaBuf, 9, 0, &handle),
            abi::kSuccess);
  EXPECT_EQ(handle->type, MemType::kDmaBuf);
  EXPECT_EQ(handle->ncclType, abi::kPtrDmaBuf);
  auto calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].type, MemType::kDmaBuf);
  EXPECT_EQ(calls[0].device, 7);
  EXPECT_EQ(calls[0].access, kBaseAccess | FI_REMOTE_READ);
  EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
}

// NCCL (transport/net.cc) calls regMrDmaBuf with type NCCL_PTR_CUDA and the DMA-BUF fd it got
// from cuMemGetHandleForAddressRange; it never passes NCCL_PTR_DMABUF as a buffer type. With
// NCCL_PTR_DMABUF advertised, that call must register the DMA-BUF, not the virtual address.
TEST_F(MemoryRegistryTest, CudaTypeWithADmaBufFdAsNcclCallsItRegistersTheDmaBuf) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda | abi::kPtrDmaBuf, FI_REMOTE_READ);
  Buffer gpu(4 * kPage);
  fake_.declare(gpu.data(), gpu.size(), 1);
  MemoryHandle* handle = nullptr;
  ASSERT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, 9, 0, &handle),
            abi::kSuccess);
  auto calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].device, 1);
  EXPECT_EQ(calls[0].type, MemType::kDmaBuf);
  EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
}

// Without NCCL_PTR_DMABUF advertised, the fd is ignored and the buffer registers by address.
TEST_F(MemoryRegistryTest, CudaTypeWithAnFdRegistersByAddressWithoutDmaBufSupport) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  Buffer gpu(4 * kPage);
  fake_.declare(gpu.data(), gpu.size(), 2);
  MemoryHandle* handle = nullptr;
  ASSERT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, 9, 0, &handle),
            abi::kSuccess);
  auto calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].type, MemType::kCuda);
  EXPECT_EQ(calls[0].device, 2);
  EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
}

TEST_F(MemoryRegistryTest, RegisterHostPassesExplicitAccessUnchanged) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  uint64_t word = 0;
  MemoryHandle* handle = nullptr;
  ASSERT_EQ(registry->registerHost(&word, sizeof(word), FI_READ, &handle), abi::kSuccess);
  EXPECT_EQ(handle->type, MemType::kHost);
  EXPECT_EQ(handle->ncclType, abi::kPtrHost);
  auto calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].type, MemType::kHost);
  EXPECT_EQ(calls[0].access, static_cast<uint64_t>(FI_READ));
  // The cache registers whole pages.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(calls[0].base) % kPage, 0u);
  EXPECT_LE(reinterpret_cast<uintptr_t>(calls[0].base), reinterpret_cast<uintptr_t>(&word));
  EXPECT_GE(reinterpret_cast<uintptr_t>(calls[0].base) + calls[0].length,
            reinterpret_cast<uintptr_t>(&word) + sizeof(word));
  EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
}

TEST_F(MemoryRegistryTest, CudaTypeForAnUndeclaredPointerIsRefusedBeforeTheRegistrar) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  Buffer host(4 * kPage);  // never declared: the fake calls it host memory
  auto* sentinel = reinterpret_cast<MemoryHandle*>(0x5a5a);
  MemoryHandle* handle = sentinel;
  EXPECT_EQ(registry->registerBuffer(host.data(), host.size(), abi::kPtrCuda, -1, 0, &handle),
            abi::kInternalError);
  EXPECT_EQ(handle, sentinel) << "no handle on failure";
  EXPECT_TRUE(recorder_.calls().empty());
  auto warnings = takeWarnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(hexPointer(host.data())), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(std::to_string(host.size())), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("cuda"), std::string::npos) << warnings[0];
  EXPECT_EQ(registry->stats().misses, 0u);
}

TEST_F(MemoryRegistryTest, CudaTypeWithoutACudaDriverIsRefused) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, 0, {}, /*withCuda=*/false);
  Buffer gpu(kPage);
  fake_.declare(gpu.data(), gpu.size(), 0);
  MemoryHandle* handle = nullptr;
  EXPECT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, -1, 0, &handle),
            abi::kInternalError);
  EXPECT_EQ(handle, nullptr);
  EXPECT_TRUE(recorder_.calls().empty());
  EXPECT_EQ(takeWarnings().size(), 1u);
}

TEST_F(MemoryRegistryTest, TypesOutsidePtrSupportAreRefusedWithOneWarn) {
  auto hostOnly = makeRegistry(abi::kPtrHost, 0);
  Buffer gpu(kPage);
  fake_.declare(gpu.data(), gpu.size(), 2);
  MemoryHandle* handle = nullptr;
  EXPECT_EQ(hostOnly->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, -1, 0, &handle),
            abi::kInternalError);
  auto warnings = takeWarnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("ptrSupport=1"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(hexPointer(gpu.data())), std::string::npos) << warnings[0];

  auto noDmaBuf = makeRegistry(abi::kPtrHost | abi::kPtrCuda, 0);
  EXPECT_EQ(noDmaBuf->registerBuffer(gpu.data(), gpu.size(), abi::kPtrDmaBuf, 7, 0, &handle),
            abi::kInternalError);
  // Not a single NCCL_PTR_* value, or no known bit at all.
  EXPECT_EQ(noDmaBuf->registerBuffer(gpu.data(), gpu.size(), abi::kPtrHost | abi::kPtrCuda, -1, 0,
                                     &handle),
            abi::kInternalError);
  EXPECT_EQ(noDmaBuf->registerBuffer(gpu.data(), gpu.size(), 8, -1, 0, &handle),
            abi::kInternalError);
  EXPECT_EQ(noDmaBuf->registerBuffer(gpu.data(), gpu.size(), 0, -1, 0, &handle),
            abi::kInternalError);
  EXPECT_EQ(takeWarnings().size(), 4u);
  EXPECT_EQ(handle, nullptr);
  EXPECT_TRUE(recorder_.calls().empty());
}

TEST_F(MemoryRegistryTest, RegistrarRefusalBecomesAnErrorCodeAndLeavesNothingBehind) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  Buffer gpu(4 * kPage);
  fake_.declare(gpu.data(), gpu.size(), 3);
  MemoryHandle* handle = nullptr;

  recorder_.failNext(-FI_ENOSYS);
  EXPECT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, -1, 0, &handle),
            abi::kSystemError);
  EXPECT_EQ(handle, nullptr);
  recorder_.failNext(-FI_EINVAL);
  EXPECT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, -1, 0, &handle),
            abi::kInternalError);
  EXPECT_EQ(handle, nullptr);
  recorder_.failNext(-FI_ENOMEM);
  EXPECT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrHost, -1, 0, &handle),
            abi::kSystemError);
  EXPECT_EQ(handle, nullptr);

  auto calls = recorder_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].result, -FI_ENOSYS);
  EXPECT_EQ(calls[0].type, MemType::kCuda);
  EXPECT_EQ(calls[0].device, 3);
  EXPECT_EQ(calls[1].result, -FI_EINVAL);
  EXPECT_EQ(calls[2].result, -FI_ENOMEM);
  EXPECT_EQ(calls[2].type, MemType::kHost);
  EXPECT_EQ(recorder_.live(), 0);
  auto stats = registry->stats();
  EXPECT_EQ(stats.live, 0u);
  EXPECT_EQ(stats.hits, 0u);

  // A later attempt registers anew: the failure was not cached.
  ASSERT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, -1, 0, &handle),
            abi::kSuccess);
  EXPECT_EQ(recorder_.registrations(), 1u);
  EXPECT_EQ(registry->stats().live, 1u);
  EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
  EXPECT_EQ(recorder_.live(), 0);
}

TEST_F(MemoryRegistryTest, EmptyBufferNeedsNoRegistration) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, 0);
  Buffer host(kPage);
  MemoryHandle* handle = nullptr;
  ASSERT_EQ(registry->registerBuffer(host.data(), 0, abi::kPtrHost, -1, 0, &handle), abi::kSuccess);
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ(handle->mr, nullptr);
  EXPECT_EQ(handle->desc, nullptr);
  EXPECT_EQ(handle->length, 0u);
  EXPECT_TRUE(recorder_.calls().empty());
  EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
  EXPECT_TRUE(recorder_.calls().empty());
}

TEST_F(MemoryRegistryTest, SubRangesHitTheCachedRegistrationWithoutReachingTheRegistrar) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  Buffer host(64 * kPage), gpu(64 * kPage);
  fake_.declare(gpu.data(), gpu.size(), 4);
  MemoryHandle *hostWhole = nullptr, *gpuWhole = nullptr;
  ASSERT_EQ(registry->registerBuffer(host.data(), host.size(), abi::kPtrHost, -1, 0, &hostWhole),
            abi::kSuccess);
  ASSERT_EQ(registry->registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, -1, 0, &gpuWhole),
            abi::kSuccess);
  ASSERT_EQ(recorder_.registrations(), 2u);

  MemoryHandle *hostPart = nullptr, *gpuPart = nullptr;
  ASSERT_EQ(
      registry->registerBuffer(host.data() + 5000, 3 * kPage + 17, abi::kPtrHost, -1, 0, &hostPart),
      abi::kSuccess);
  ASSERT_EQ(
      registry->registerBuffer(gpu.data() + 8 * kPage + 1, 100, abi::kPtrCuda, -1, 0, &gpuPart),
      abi::kSuccess);
  EXPECT_EQ(recorder_.registrations(), 2u) << "sub-ranges must not reach the registrar";
  EXPECT_EQ(hostPart->mr, hostWhole->mr);
  EXPECT_EQ(gpuPart->mr, gpuWhole->mr);
  EXPECT_EQ(hostPart->desc, hostWhole->desc);
  EXPECT_EQ(hostPart->base, host.data() + 5000);
  EXPECT_EQ(hostPart->length, 3 * kPage + 17);
  EXPECT_EQ(gpuPart->type, MemType::kCuda);
  EXPECT_EQ(gpuPart->remoteAddress(gpu.data() + 8 * kPage + 1),
            reinterpret_cast<uint64_t>(gpu.data()) + 8 * kPage + 1);
  auto stats = registry->stats();
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.live, 2u);

  // The same GPU range given as host memory is a different registration (memory type differs).
  MemoryHandle* asHost = nullptr;
  ASSERT_EQ(registry->registerBuffer(gpu.data(), kPage, abi::kPtrHost, -1, 0, &asHost),
            abi::kSuccess);
  EXPECT_EQ(recorder_.registrations(), 3u);
  EXPECT_NE(asHost->mr, gpuWhole->mr);
  EXPECT_EQ(recorder_.calls().back().type, MemType::kHost);

  // Releasing the parts leaves the registrations; the last holder's release deregisters.
  for (MemoryHandle* handle : {hostPart, gpuPart, asHost}) {
    EXPECT_EQ(registry->deregister(handle), abi::kSuccess);
  }
  EXPECT_EQ(recorder_.deregistrations(), 1u);  // asHost only
  EXPECT_EQ(registry->deregister(hostWhole), abi::kSuccess);
  EXPECT_EQ(registry->deregister(gpuWhole), abi::kSuccess);
  EXPECT_EQ(recorder_.deregistrations(), 3u);
  EXPECT_EQ(recorder_.live(), 0);
  EXPECT_EQ(registry->stats().live, 0u);
}

TEST_F(MemoryRegistryTest, DisabledCacheRegistersEveryBuffer) {
  memory::MrCacheOptions options;
  options.enabled = false;
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, 0, options);
  Buffer host(16 * kPage);
  MemoryHandle *whole = nullptr, *part = nullptr;
  ASSERT_EQ(registry->registerBuffer(host.data(), host.size(), abi::kPtrHost, -1, 0, &whole),
            abi::kSuccess);
  ASSERT_EQ(registry->registerBuffer(host.data() + kPage, kPage, abi::kPtrHost, -1, 0, &part),
            abi::kSuccess);
  EXPECT_EQ(recorder_.registrations(), 2u);
  EXPECT_NE(part->mr, whole->mr);
  EXPECT_EQ(registry->stats().hits, 0u);
  EXPECT_EQ(registry->deregister(part), abi::kSuccess);
  EXPECT_EQ(registry->deregister(whole), abi::kSuccess);
  EXPECT_EQ(recorder_.deregistrations(), 2u);
}

// NCCL's pattern for user buffers under regIsGlobal: one large buffer stays registered while
// many regMr/deregMr of pieces of it come and go. Reports the hit rate.
void reRegistrationHeavy(MemoryRegistryTest* self, RecordingRegistrar& recorder,
                         MemoryRegistry& registry, char* base, size_t size, int ncclType,
                         const char* label) {
  constexpr int kOps = 10000;
  constexpr size_t kWindow = 8;  // registrations in flight at once
  MemoryHandle* whole = nullptr;
  ASSERT_EQ(registry.registerBuffer(base, size, ncclType, -1, 0, &whole), abi::kSuccess);
  std::mt19937_64 random(0x5eed);
  std::vector<MemoryHandle*> inFlight;
  for (int i = 0; i < kOps; ++i) {
    size_t offset = random() % size;
    size_t length = 1 + random() % (size - offset);
    if (random() % 4 == 0) length = 1 + random() % std::min<size_t>(size - offset, 1 << 20);
    MemoryHandle* handle = nullptr;
    ASSERT_EQ(registry.registerBuffer(base + offset, length, ncclType, -1, 0, &handle),
              abi::kSuccess)
        << "op " << i;
    ASSERT_EQ(handle->mr, whole->mr) << "op " << i << ": offset " << offset << " length " << length;
    inFlight.push_back(handle);
    if (inFlight.size() >= kWindow || random() % 3 == 0) {
      size_t victim = random() % inFlight.size();
      ASSERT_EQ(registry.deregister(inFlight[victim]), abi::kSuccess);
      inFlight.erase(inFlight.begin() + static_cast<long>(victim));
    }
  }
  for (MemoryHandle* handle : inFlight) ASSERT_EQ(registry.deregister(handle), abi::kSuccess);
  memory::MrCacheStats stats = registry.stats();
  double rate =
      100.0 * static_cast<double>(stats.hits) / static_cast<double>(stats.hits + stats.misses);
  std::cout << "[ hit rate ] " << label << ": " << kOps << " sub-range regMr of a " << (size >> 20)
            << " MiB buffer: hits=" << stats.hits << " misses=" << stats.misses << " (" << rate
            << "% incl. the first registration), provider registrations="
            << recorder.registrations() << "\n";
  self->RecordProperty(std::string(label) + "_hits", static_cast<int>(stats.hits));
  self->RecordProperty(std::string(label) + "_misses", static_cast<int>(stats.misses));
  EXPECT_EQ(stats.hits, static_cast<uint64_t>(kOps));
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(recorder.registrations(), 1u);
  EXPECT_EQ(recorder.deregistrations(), 0u);
  ASSERT_EQ(registry.deregister(whole), abi::kSuccess);
  EXPECT_EQ(recorder.deregistrations(), 1u);
  EXPECT_EQ(recorder.live(), 0);
}

TEST_F(MemoryRegistryTest, ReRegistrationHeavyHostHitRate) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, 0);
  Buffer buffer(64u << 20);
  reRegistrationHeavy(this, recorder_, *registry, buffer.data(), buffer.size(), abi::kPtrHost,
                      "host");
}

TEST_F(MemoryRegistryTest, ReRegistrationHeavyCudaHitRate) {
  auto registry = makeRegistry(abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  Buffer buffer(64u << 20);
  fake_.declare(buffer.data(), buffer.size(), 6);
  reRegistrationHeavy(this, recorder_, *registry, buffer.data(), buffer.size(), abi::kPtrCuda,
                      "cuda");
  EXPECT_EQ(recorder_.calls().front().device, 6);
}

// --- Through a real shm domain -----------------------------------------------------------------

class MemoryRegistryShmTest : public MemoryRegistryTest {
 protected:
  void SetUp() override {
    MemoryRegistryTest::SetUp();
    if (HasFatalFailure()) return;
    fi_info* hints = fi_allocinfo();
    ASSERT_NE(hints, nullptr);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_HMEM;
    hints->domain_attr->mr_mode = static_cast<int>(FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                                   FI_MR_PROV_KEY | FI_MR_LOCAL | FI_MR_HMEM);
    hints->fabric_attr->prov_name = strdup("shm");
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (rc != 0 || info_ == nullptr) {
      GTEST_SKIP() << "shm offers no RDM endpoint with FI_HMEM here: " << fi_strerror(-rc);
    }
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric_, info_, &domain_, nullptr), 0);
    fabricRegistrar_ = std::make_unique<memory::FabricRegistrar>(domain_, info_, domainLock_);
    wrapper_ = std::make_unique<RecordingRegistrar>(fabricRegistrar_.get());
  }
  void TearDown() override {
    fabricRegistrar_.reset();
    if (domain_ != nullptr) {
      EXPECT_EQ(fi_close(&domain_->fid), 0);
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
    if (info_ != nullptr) fi_freeinfo(info_);
    MemoryRegistryTest::TearDown();
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  nnf::fabric::DomainLock domainLock_;
  std::unique_ptr<memory::FabricRegistrar> fabricRegistrar_;
  std::unique_ptr<RecordingRegistrar> wrapper_;
};

TEST_F(MemoryRegistryShmTest, HostRegistersAndSubRangesHitOnARealDomain) {
  ASSERT_TRUE(fabricRegistrar_->providerHasHmem());
  MemoryRegistry registry(*wrapper_, domainLock_, {true, 0, 0, kPage}, cuda_.get(),
                          abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  Buffer host(32 * kPage);
  MemoryHandle *whole = nullptr, *part = nullptr;
  ASSERT_EQ(registry.registerBuffer(host.data(), host.size(), abi::kPtrHost, -1, 0, &whole),
            abi::kSuccess);
  ASSERT_NE(whole->mr->registration().provider, nullptr) << "a real fid_mr";
  ASSERT_EQ(
      registry.registerBuffer(host.data() + 3 * kPage, 5 * kPage, abi::kPtrHost, -1, 0, &part),
      abi::kSuccess);
  EXPECT_EQ(part->mr, whole->mr);
  EXPECT_EQ(wrapper_->registrations(), 1u);
  EXPECT_EQ(registry.stats().hits, 1u);
  EXPECT_EQ(registry.deregister(part), abi::kSuccess);
  EXPECT_EQ(registry.deregister(whole), abi::kSuccess);
  EXPECT_EQ(wrapper_->deregistrations(), 1u);
  EXPECT_EQ(wrapper_->live(), 0);
  EXPECT_TRUE(takeWarnings().empty());
}

TEST_F(MemoryRegistryShmTest, ProviderRefusingCudaMemoryGivesAnErrorAndOneWarnWithDetails) {
  MemoryRegistry registry(*wrapper_, domainLock_, {true, 0, 0, kPage}, cuda_.get(),
                          abi::kPtrHost | abi::kPtrCuda, FI_REMOTE_READ);
  Buffer gpu(8 * kPage);
  fake_.declare(gpu.data(), gpu.size(), 2);
  MemoryHandle* handle = nullptr;
  abi::Result result =
      registry.registerBuffer(gpu.data(), gpu.size(), abi::kPtrCuda, -1, 0, &handle);
  auto calls = wrapper_->calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].type, MemType::kCuda);
  EXPECT_EQ(calls[0].device, 2);
  EXPECT_EQ(calls[0].access, kBaseAccess | FI_REMOTE_READ);
  if (calls[0].result == 0) {
    // A libfabric built with CUDA support would accept it (not the case in this image).
    EXPECT_EQ(result, abi::kSuccess);
    EXPECT_EQ(registry.deregister(handle), abi::kSuccess);
    GTEST_SKIP() << "this libfabric's shm accepts FI_HMEM_CUDA registrations";
  }
  EXPECT_NE(result, abi::kSuccess);
  EXPECT_EQ(result, calls[0].result == -FI_EINVAL ? abi::kInternalError : abi::kSystemError);
  EXPECT_EQ(handle, nullptr);
  auto warnings = takeWarnings();
  ASSERT_EQ(warnings.size(), 1u) << "exactly one WARN";
  const std::string& text = warnings[0];
  EXPECT_NE(text.find(hexPointer(gpu.data())), std::string::npos) << text;
  EXPECT_NE(text.find(std::to_string(gpu.size()) + " bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("CUDA"), std::string::npos) << text;
  EXPECT_NE(text.find("device 2"), std::string::npos) << text;
  EXPECT_NE(text.find(fi_strerror(-calls[0].result)), std::string::npos) << text;
  std::cout << "[ shm refusal ] rc=" << calls[0].result << ": " << text << "\n";
  EXPECT_EQ(registry.stats().live, 0u);
  EXPECT_EQ(wrapper_->live(), 0);
}

}  // namespace
}  // namespace nnf::core
