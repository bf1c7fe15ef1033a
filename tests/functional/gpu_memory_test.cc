// GPU memory through the built plugin without a GPU: the plugin loads the fake CUDA driver
// (NCCL_FABRIC_CUDA_LIBRARY, set before init in the children's environment), which calls chosen
// host ranges device memory. Checks what ptrSupport the plugin advertises per provider, that a
// CUDA registration the provider refuses is an error with one precise WARN while host memory
// keeps working, that host receives need no flush request, and that the .so has no link-time
// CUDA dependency.
#include <dlfcn.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/fake_cuda_controls.h"
#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x47;

std::string fakeCudaPath() {
  return fakeCudaLibrary();
}

// The providers a test runs on: the one ctest names (NNF_TEST_PROVIDER, else FI_PROVIDER), or,
// when neither is set, shm and then tcp, each selected with FI_PROVIDER in the children's
// environment. (The per-provider ENVIRONMENT of tests/CMakeLists.txt does not reach the tests
// at present: gtest_discover_tests flattens its lists. This keeps the file correct either way.)
std::vector<std::string> providers() {
  std::string provider = testProvider();  // without the protocol part of NNF_TEST_PROVIDER
  if (!provider.empty()) return {provider};
  return {"shm", "tcp"};
}

// Runs `body` once per provider; `applies` says whether the case makes sense there. Skips the
// test (with the reason) when it applies to none.
template <typename Body>
void forEachProvider(const char* needs, bool (*applies)(const std::string&), Body body) {
  int ran = 0;
  std::string skipped;
  for (const std::string& provider : providers()) {
    if (applies != nullptr && !applies(provider)) {
      skipped += (skipped.empty() ? "" : ", ") + provider;
      continue;
    }
    SCOPED_TRACE("provider " + provider);
    ScopedEnv env;
    // The EFA-rules provider was set up by the support library (useTestProvider); FI_PROVIDER
    // would hide the provider it runs over.
    if (provider != "efa") env.set("FI_PROVIDER", provider);
    if (std::getenv("FI_TCP_IFACE") == nullptr) env.set("FI_TCP_IFACE", "lo");
    body(provider);
    ++ran;
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (ran == 0) GTEST_SKIP() << "needs " << needs << "; not the case for " << skipped;
}

bool isTcp(const std::string& provider) {
  return provider == "tcp";
}
bool isShm(const std::string& provider) {
  return provider == "shm";
}

class GpuMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = fakeCudaPath();
    ASSERT_EQ(access(fake_.c_str(), R_OK), 0)
        << "the fake CUDA driver " << fake_ << " is missing (build target nnf_fake_cuda)";
  }
  void useFake(ScopedEnv& env) { env.set("NCCL_FABRIC_CUDA_LIBRARY", fake_); }

  std::string fake_;
};

// (a) tcp offers no FI_HMEM: host memory only although the (fake) CUDA driver is usable.
TEST_F(GpuMemory, HostOnlyProviderAdvertisesHostMemoryOnlyEvenWithCuda) {
  ScopedEnv env;
  useFake(env);
  std::string fake = fake_;
  forEachProvider("a provider without FI_HMEM (tcp)", isTcp, [&](const std::string&) {
    runOneProcess([fake](Peer& peer) {
      FakeControls controls;
      ASSERT_NO_FATAL_FAILURE(openFake(fake, &controls));  // CUDA really was loaded
      EXPECT_EQ(peer.props.ptrSupport, abi::kPtrHost);
      EXPECT_EQ(peer.warnings(), 0);
    });
  });
}

// What the provider itself answers, asked with raw libfabric: does it offer FI_HMEM, and does
// its endpoint accept FI_OPT_CUDA_API_PERMITTED=false (10, as in libfabric 2.x)? Only then may
// the plugin offer GPU buffers (NCCL's proxy thread must not make CUDA calls in the provider).
enum class HmemSupport { kNone, kWithoutCudaControl, kWithCudaControl };

HmemSupport probeHmem(const std::string& provider) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV | FI_HMEM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_HMEM;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  fi_info* info = nullptr;
  int rc =
      fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  if (rc != 0 || info == nullptr) return HmemSupport::kNone;
  HmemSupport result = HmemSupport::kWithoutCudaControl;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_ep* ep = nullptr;
  if (fi_fabric(info->fabric_attr, &fabric, nullptr) == 0 &&
      fi_domain(fabric, info, &domain, nullptr) == 0 &&
      fi_endpoint(domain, info, &ep, nullptr) == 0) {
    bool permitted = false;
    if (fi_setopt(&ep->fid, FI_OPT_ENDPOINT, 10, &permitted, sizeof(permitted)) == 0)
      result = HmemSupport::kWithCudaControl;
  }
  if (ep != nullptr) fi_close(&ep->fid);
  if (domain != nullptr) fi_close(&domain->fid);
  if (fabric != nullptr) fi_close(&fabric->fid);
  fi_freeinfo(info);
  return result;
}

void shmRefusesCuda(const std::string& fake);

// (b) shm offers FI_HMEM. Where its endpoint cannot be told to make no CUDA calls (libfabric
// 1.17), the plugin offers host memory only, with one WARN naming the option; where it can, CUDA
// is advertised and libfabric (built without CUDA here) refuses the fake device memory. Host
// memory registers and moves data either way.
TEST_F(GpuMemory, ShmOffersCudaOnlyWithCudaCallsForbiddenAndStillMovesHostData) {
  ScopedEnv env;
  useFake(env);
  std::string fake = fake_;
  forEachProvider("a provider with FI_HMEM (shm)", isShm,
                  [&](const std::string&) { shmRefusesCuda(fake); });
}

void shmRefusesCuda(const std::string& fake) {
  HmemSupport support = probeHmem("shm");
  std::cerr << "shm FI_HMEM support: " << static_cast<int>(support) << "\n";
  bool cuda = support == HmemSupport::kWithCudaControl;
  int initWarnings = support == HmemSupport::kWithoutCudaControl ? 1 : 0;
  constexpr size_t kSize = 256 << 10;
  auto sender = [&](Peer& peer) {
    EXPECT_EQ(peer.props.ptrSupport & (abi::kPtrHost | abi::kPtrCuda),
              abi::kPtrHost | (cuda ? abi::kPtrCuda : 0));
    EXPECT_EQ(peer.warnings(), initWarnings);
    if (initWarnings > 0) {
      EXPECT_NE(peer.warningTexts()[0].find("FI_OPT_CUDA_API_PERMITTED"), std::string::npos);
      EXPECT_NE(peer.warningTexts()[0].find("host memory only"), std::string::npos);
    }
    peer.resetWarnings();
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    fillPattern(buffer.data(), kSize, 7);
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), kSize, kTag, mh, &request));
    int size = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
    EXPECT_EQ(size, static_cast<int>(kSize));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
    EXPECT_EQ(peer.warnings(), 0);
  };
  auto receiver = [&](Peer& peer) {
    EXPECT_EQ(peer.props.ptrSupport & (abi::kPtrHost | abi::kPtrCuda),
              abi::kPtrHost | (cuda ? abi::kPtrCuda : 0));
    FakeControls controls;
    ASSERT_NO_FATAL_FAILURE(openFake(fake, &controls));
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));

    HostBuffer gpu(kSize);
    controls.declare(gpu.data(), gpu.size(), 0);
    peer.resetWarnings();
    void* gpuHandle = reinterpret_cast<void*>(0x1);
    abi::Result result = peer.net->regMr(comm, gpu.data(), gpu.size(), abi::kPtrCuda, &gpuHandle);
    EXPECT_NE(result, abi::kSuccess) << "libfabric here has no CUDA: shm must refuse";
    std::vector<std::string> warnings = peer.warningTexts();
    ASSERT_EQ(warnings.size(), 1u) << "exactly one WARN for the refused registration";
    const std::string& text = warnings[0];
    if (!cuda) {
      // Not offered, so refused by the plugin before the provider sees it.
      EXPECT_NE(text.find("not supported by this device"), std::string::npos) << text;
      peer.resetWarnings();
    }
    char address[32];
    snprintf(address, sizeof(address), "%p", static_cast<void*>(gpu.data()));
    EXPECT_NE(text.find(address), std::string::npos) << "names the buffer: " << text;
    EXPECT_NE(text.find(std::to_string(kSize) + " bytes"), std::string::npos) << text;
    EXPECT_NE(text.find(cuda ? "CUDA" : "cuda"), std::string::npos)
        << "names the memory type: " << text;
    // The provider's error: "...: <fi_strerror text> (<negative code>)" at the end.
    size_t open = text.rfind('(');
    ASSERT_NE(open, std::string::npos) << text;
    int rc = atoi(text.c_str() + open + 1);
    if (cuda) {
      EXPECT_LT(rc, 0) << text;
      EXPECT_NE(text.find(fi_strerror(-rc)), std::string::npos) << "provider error text: " << text;
    }
    fprintf(stderr, "[receiver] refused CUDA regMr -> result %d, WARN: %s\n", result, text.c_str());
    peer.resetWarnings();

    // Host memory still works, and receives data.
    HostBuffer buffer(kSize);
    fillSentinel(buffer.data(), kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), kSize, kTag, mh, &request));
    int size = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
    EXPECT_EQ(size, static_cast<int>(kSize));
    EXPECT_TRUE(verifyPattern(buffer.data(), kSize, 7));
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
    EXPECT_EQ(peer.warnings(), 0);
  };
  runTwoProcesses(sender, receiver, 120);
}

// (c) No CUDA driver at all: host memory only on every provider, and init still succeeds.
TEST_F(GpuMemory, WithoutCudaTheProviderIsUsedForHostMemoryOnly) {
  ScopedEnv env;
  env.set("NCCL_FABRIC_CUDA_LIBRARY", "/nonexistent/libcuda.so.1");
  std::string fake = fake_;
  forEachProvider("any provider", nullptr, [&](const std::string&) {
    runOneProcess([fake](Peer& peer) {
      EXPECT_EQ(peer.props.ptrSupport, abi::kPtrHost);
      // On softefa libfabric's own CUDA support loads the fake too (as libcuda.so.1): only the
      // plugin is without CUDA there.
      if (!onSoftEfa()) {
        EXPECT_EQ(dlopen(fake.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr)
            << "fake must not be loaded";
      }
      EXPECT_EQ(peer.warnings(), 0) << "missing CUDA is an INFO, not a WARN";
    });
  });
}

// (d) NCCL_FABRIC_GDR=off forces host memory even with a usable driver and an FI_HMEM provider.
TEST_F(GpuMemory, GdrOffForcesHostMemoryOnly) {
  ScopedEnv env;
  useFake(env);
  env.set("NCCL_FABRIC_GDR", "off");
  forEachProvider("any provider", nullptr, [&](const std::string&) {
    runOneProcess([](Peer& peer) { EXPECT_EQ(peer.props.ptrSupport, abi::kPtrHost); });
  });
}

// Control for (d): the same run without GDR=off advertises CUDA where the provider offers
// FI_HMEM and forbids itself CUDA calls, so (d) is not passing for a reason unrelated to the
// parameter. (The EFA-rules provider always can: tests/functional/efa_rules_test.cc.)
TEST_F(GpuMemory, GdrAutoAdvertisesCudaWhereTheProviderAllows) {
  ScopedEnv env;
  useFake(env);
  env.set("NCCL_FABRIC_GDR", "auto");
  forEachProvider("any provider", nullptr, [&](const std::string& provider) {
    bool cuda = probeHmem(provider) == HmemSupport::kWithCudaControl;
    runOneProcess([cuda](Peer& peer) {
      EXPECT_EQ(peer.props.ptrSupport & abi::kPtrCuda, cuda ? abi::kPtrCuda : 0);
      EXPECT_EQ(peer.props.ptrSupport & abi::kPtrHost, abi::kPtrHost);
    });
  });
}

// (e) iflush after host receives (with data and empty) needs no request, whatever the flush
// setting, and never calls the CUDA flush.
void iflushHostReceives(const std::string& fake) {
  constexpr int kSize = 64 << 10;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    fillPattern(buffer.data(), kSize, 3);
    for (int size : {kSize, 0}) {
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), size, kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    }
    ASSERT_TRUE(peer.channel->wait());  // the receiver has flushed
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    FakeControls controls;
    ASSERT_NO_FATAL_FAILURE(openFake(fake, &controls));
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    peer.resetWarnings();  // init may warn about GPUDirect; this test is about iflush
    HostBuffer buffer(kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int expected : {kSize, 0}) {
      SCOPED_TRACE("receive of " + std::to_string(expected) + " bytes");
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), kSize, kTag, mh, &request));
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
      ASSERT_EQ(size, expected);
      void* data[1] = {buffer.data()};
      int sizes[1] = {size};
      void* handles[1] = {mh};
      void* flush = reinterpret_cast<void*>(0x1);
      EXPECT_EQ(peer.net->iflush(comm, 1, data, sizes, handles, &flush), abi::kSuccess);
      EXPECT_EQ(flush, nullptr) << "host memory needs no flush request";
    }
    EXPECT_TRUE(verifyPattern(buffer.data(), kSize, 3));
    EXPECT_EQ(controls.flushCount(), 0) << "no cuFlushGPUDirectRDMAWrites for host memory";
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
    EXPECT_EQ(peer.warnings(), 0);
  };
  runTwoProcesses(sender, receiver, 120);
}

TEST_F(GpuMemory, IflushOfHostReceivesReturnsNullRequest) {
  ScopedEnv env;
  useFake(env);
  forEachProvider("any provider", nullptr, [&](const std::string&) { iflushHostReceives(fake_); });
}

TEST_F(GpuMemory, IflushOfHostReceivesReturnsNullRequestWithCudaFlushSetting) {
  ScopedEnv env;
  useFake(env);
  env.set("NCCL_FABRIC_GDR_FLUSH", "cuda");
  forEachProvider("any provider", nullptr, [&](const std::string&) { iflushHostReceives(fake_); });
}

// (f) No link-time CUDA dependency.
TEST_F(GpuMemory, PluginHasNoLinkTimeCudaDependency) {
  std::string command = "ldd '" + pluginPath() + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char line[1024];
  while (fgets(line, sizeof(line), pipe) != nullptr) output += line;
  int status = pclose(pipe);
  ASSERT_EQ(status, 0) << command << "\n" << output;
  EXPECT_NE(output.find("libfabric"), std::string::npos) << output;
  EXPECT_EQ(output.find("libcuda"), std::string::npos) << output;
  EXPECT_EQ(output.find("libcudart"), std::string::npos) << output;
  EXPECT_EQ(output.find("not found"), std::string::npos) << output;
  RecordProperty("ldd", output);
  std::cout << "[ ldd ] " << pluginPath() << "\n" << output;
}

}  // namespace
}  // namespace nnf::test
