// CudaDriver against a missing library and against the fake driver (tests/fake_cuda).
#include "memory/cuda_driver.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "config/config.h"

namespace nnf::memory {
namespace {

// The fake's test controls, reached through the same dlopen handle the driver uses.
struct FakeCuda {
  void (*declare)(void*, size_t, int) = nullptr;
  void (*reset)() = nullptr;
  void (*setInitResult)(int) = nullptr;
  int (*flushCount)() = nullptr;
  int (*exportCount)() = nullptr;
  void* library = nullptr;

  FakeCuda() {
    library = dlopen(NNF_FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return;
    declare = reinterpret_cast<decltype(declare)>(dlsym(library, "nnfFakeCudaDeclare"));
    reset = reinterpret_cast<decltype(reset)>(dlsym(library, "nnfFakeCudaReset"));
    setInitResult =
        reinterpret_cast<decltype(setInitResult)>(dlsym(library, "nnfFakeCudaSetInitResult"));
    flushCount = reinterpret_cast<decltype(flushCount)>(dlsym(library, "nnfFakeCudaFlushCount"));
    exportCount = reinterpret_cast<decltype(exportCount)>(dlsym(library, "nnfFakeCudaExportCount"));
  }
};

class CudaDriverFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(fake_.library, nullptr) << dlerror();
    ASSERT_NE(fake_.declare, nullptr);
    fake_.reset();
  }
  FakeCuda fake_;
};

TEST(CudaDriverMissing, MissingLibraryIsUnavailableWithAReason) {
  CudaDriver driver("/nonexistent/libcuda-missing.so.1");
  EXPECT_FALSE(driver.available());
  EXPECT_NE(driver.reason().find("not loaded"), std::string::npos) << driver.reason();
  EXPECT_NE(driver.reason().find("host memory only"), std::string::npos) << driver.reason();
  EXPECT_EQ(driver.driverVersion(), 0);
  EXPECT_FALSE(driver.hasFlush());
  // Every pointer is host memory without CUDA; the optional calls fail cleanly.
  int local = 0;
  PointerInfo info;
  info.device = true;
  EXPECT_EQ(driver.pointerInfo(&local, &info), cu::kSuccess);
  EXPECT_FALSE(info.device);
  EXPECT_EQ(info.ordinal, -1);
  int fd = -1;
  EXPECT_NE(driver.dmaBufFd(&local, sizeof(local), &fd), cu::kSuccess);
  EXPECT_NE(driver.flushGdrWrites(), cu::kSuccess);
}

TEST(CudaDriverMissing, LibraryWithoutDriverSymbolsIsUnavailable) {
  CudaDriver driver("libm.so.6");
  EXPECT_FALSE(driver.available());
  EXPECT_NE(driver.reason().find("lacks cuInit"), std::string::npos) << driver.reason();
}

TEST(CudaDriverMissing, PathComesFromConfiguration) {
  auto config = config::Config::load([](const char* name) -> const char* {
    return std::string(name) == "NCCL_FABRIC_CUDA_LIBRARY" ? "/nonexistent/libcuda.so" : nullptr;
  });
  CudaDriver driver = CudaDriver::fromConfig(config);
  EXPECT_EQ(driver.path(), "/nonexistent/libcuda.so");
  EXPECT_FALSE(driver.available());
  auto defaults = config::Config::load([](const char*) -> const char* { return nullptr; });
  EXPECT_EQ(CudaDriver::fromConfig(defaults).path(), "libcuda.so.1");
}

TEST_F(CudaDriverFakeTest, LoadsAndReportsVersionAndOptionalCalls) {
  CudaDriver driver(NNF_FAKE_CUDA_PATH);
  ASSERT_TRUE(driver.available()) << driver.reason();
  EXPECT_EQ(driver.driverVersion(), 12040);
  EXPECT_TRUE(driver.hasDmaBufExport());
  EXPECT_TRUE(driver.hasFlush());
  EXPECT_NE(driver.reason().find("CUDA driver 12.4"), std::string::npos) << driver.reason();
}

TEST_F(CudaDriverFakeTest, DeclaredRangesAreDeviceMemoryOfTheirOrdinal) {
  std::vector<char> gpu0(8192), gpu3(4096), plain(4096);
  fake_.declare(gpu0.data(), gpu0.size(), 0);
  fake_.declare(gpu3.data(), gpu3.size(), 3);
  CudaDriver driver(NNF_FAKE_CUDA_PATH);
  ASSERT_TRUE(driver.available()) << driver.reason();

  PointerInfo info;
  ASSERT_EQ(driver.pointerInfo(gpu0.data() + 100, &info), cu::kSuccess);
  EXPECT_TRUE(info.device);
  EXPECT_EQ(info.ordinal, 0);
  ASSERT_EQ(driver.pointerInfo(gpu3.data() + 4095, &info), cu::kSuccess);
  EXPECT_TRUE(info.device);
  EXPECT_EQ(info.ordinal, 3);
  ASSERT_EQ(driver.pointerInfo(plain.data(), &info), cu::kSuccess);
  EXPECT_FALSE(info.device);
  EXPECT_EQ(info.ordinal, -1);
  // An address no range covers (never dereferenced) is host memory too.
  ASSERT_EQ(driver.pointerInfo(reinterpret_cast<const void*>(uintptr_t{0x1000}), &info),
            cu::kSuccess);
  EXPECT_FALSE(info.device);
}

TEST_F(CudaDriverFakeTest, NoDeviceMakesTheDriverUnavailable) {
  fake_.setInitResult(cu::kErrorNoDevice);
  CudaDriver driver(NNF_FAKE_CUDA_PATH);
  EXPECT_FALSE(driver.available());
  EXPECT_NE(driver.reason().find("no CUDA device"), std::string::npos) << driver.reason();
  std::vector<char> buffer(64);
  fake_.declare(buffer.data(), buffer.size(), 1);
  PointerInfo info;
  EXPECT_EQ(driver.pointerInfo(buffer.data(), &info), cu::kSuccess);
  EXPECT_FALSE(info.device);  // unusable CUDA: nothing is treated as device memory
}

TEST_F(CudaDriverFakeTest, FlushAndDmaBufExportReachTheDriver) {
  std::vector<char> gpu(4096);
  fake_.declare(gpu.data(), gpu.size(), 2);
  CudaDriver driver(NNF_FAKE_CUDA_PATH);
  ASSERT_TRUE(driver.available()) << driver.reason();
  EXPECT_EQ(driver.flushGdrWrites(), cu::kSuccess);
  EXPECT_EQ(driver.flushGdrWrites(), cu::kSuccess);
  EXPECT_EQ(fake_.flushCount(), 2);
  int fd = -1;
  ASSERT_EQ(driver.dmaBufFd(gpu.data(), gpu.size(), &fd), cu::kSuccess);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(fake_.exportCount(), 1);
  // Beyond the declared range the export is refused.
  EXPECT_EQ(driver.dmaBufFd(gpu.data(), gpu.size() + 1, &fd), cu::kErrorInvalidValue);
}

}  // namespace
}  // namespace nnf::memory
