// The GPU check: GPU buffers moved between two processes through the built plugin, driven as
// NCCL drives it (tests/support's harness), filled on the GPU with cuMemcpyHtoD and compared
// byte for byte on the host after cuMemcpyDtoH. It needs an NVIDIA GPU and a libfabric built with
// CUDA (tests/gpu/run.sh builds both plugin and libfabric); anywhere else it fails with the
// reason. main() passes only when every check ran and passed and the receivers verified exactly
// the GPU bytes the checks sent.
//
// The provider is our EFA-rules provider (tests/efa_rules) over shm with NNF_EFA_RULES_HMEM_BASE=1:
// shm (libfabric 2.x, built with CUDA) takes CUDA memory but refuses
// FI_OPT_CUDA_API_PERMITTED=false, so on plain shm the plugin rightly offers host memory only
// (checked below); the EFA-rules provider accepts the option as EFA does, hands device memory to
// shm as FI_HMEM_CUDA, and reports every EFA rule the plugin breaks (inject from device memory, a
// post without its descriptor, a flush read through shared memory, ...). The CPU cannot read
// cuMemAlloc'd memory: a plugin that copied from it with the CPU would crash its process, which
// fails the check.
#include <dlfcn.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cuda_api.h"
#include "gpu/ledger.h"
#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGuard = 4096;  // bytes after a message that must stay untouched
constexpr size_t kCapacity = 64 * kMiB + 2 * kGuard;  // each side's one GPU buffer
constexpr size_t kSlot = 4 * kMiB;  // pipelined and grouped messages: one slot each
constexpr uint8_t kSentinel = 0xA5;
constexpr int kTag = 0x6b;
constexpr int kOptCudaApiPermitted = 10;  // FI_OPT_CUDA_API_PERMITTED (libfabric >= 1.18)
constexpr double kTimeoutSec = 300;

// Every size class the plugin treats differently: empty, under and over the inject limit
// (EFA: 4 KiB less a header), page sizes and their neighbours, up to NCCL's largest buffers.
// clang-format off
const std::vector<int> kSweepSizes = {
    0, 1, 2, 3, 7, 8, 15, 16, 63, 64, 65, 127, 128, 129, 255, 256, 1000, 1023, 1024,
    4031, 4032, 4033, 4095, 4096, 4097, 8191, 8192, 16384, 65535, 65536, 65537, 262144,
    (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 4 << 20, (8 << 20) + 3, 16 << 20, 32 << 20, 64 << 20};
// clang-format on
// The CUDA-flush pass needs only a few sizes: the flush path, not the data path, differs.
const std::vector<int> kCudaFlushSizes = {0, 1, 64, 4096, 65537, 1 << 20, 16 << 20};

// The least the checks send GPU to GPU, summed in the parent from their tables: a check whose
// loop ran short fails the verdict even if nothing else noticed.
uint64_t g_expectedGpuBytes = 0;
// The driver check's outcome: 0 not run, 1 passed, -1 failed (the other checks then say so).
int g_driver = 0;

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& line : lines) all += "  " + line + "\n";
  return all;
}

// The plugin's INFO line about GPU memory ("memory: ptrSupport=1 (...)"), for failure messages.
std::string ptrSupportReason(const Peer& peer) {
  for (const std::string& line : peer.infoTexts())
    if (line.find("ptrSupport=") != std::string::npos && line.find("memory:") != std::string::npos)
      return line;
  return "no INFO line about ptrSupport";
}

// fi_getinfo for shm's FI_EP_RDM endpoints with FI_HMEM: 0 or the error.
int getShmHmemInfo(fi_info** info) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_TAGGED | FI_MSG | FI_HMEM;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_HMEM;
  hints->fabric_attr->prov_name = strdup("shm");
  int rc =
      fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, info);
  fi_freeinfo(hints);
  return rc;
}

// What an endpoint of `info` answers when asked to make no CUDA calls
// (FI_OPT_CUDA_API_PERMITTED=false, as the plugin asks): 0 or the error. *opened says whether
// an endpoint opened at all (the error is fi_endpoint's otherwise).
int askCudaCallBan(fid_domain* domain, fi_info* info, bool* opened) {
  fid_ep* ep = nullptr;
  int rc = fi_endpoint(domain, info, &ep, nullptr);
  *opened = rc == 0;
  if (rc != 0) return rc;
  bool permitted = false;
  rc = fi_setopt(&ep->fid, FI_OPT_ENDPOINT, kOptCudaApiPermitted, &permitted, sizeof(permitted));
  fi_close(&ep->fid);
  return rc;
}

// Where a message goes in the buffer: offsets that are not page aligned for small messages
// (a registration serves its sub-ranges), and receive sizes above the send size now and then.
struct Placement {
  size_t offset;
  int capacity;  // the size the receive is posted with
  size_t guard;  // bytes after the message checked for the sentinel
};

Placement place(size_t index, int size) {
  size_t bytes = static_cast<size_t>(size);
  size_t offset = bytes <= kMiB ? (index * 4099) % (2 * kMiB) : (index % 2) * kGuard;
  size_t room = kCapacity - offset - bytes;
  size_t slack = index % 3 == 0 ? std::min<size_t>(room, 4096 + index) : 0;
  return {offset, size + static_cast<int>(slack), std::min(room, kGuard)};
}

uint64_t messageId(int pass, size_t index) {
  return 1000000 * static_cast<uint64_t>(pass) + index;
}

void openCuda(CudaApi& cuda) {
  ASSERT_TRUE(cuda.open()) << cuda.error();
}

void allocated(const CudaApi& cuda, const DeviceBuffer& buffer) {
  ASSERT_EQ(buffer.result(), 0) << "cuMemAlloc of " << buffer.size()
                                << " bytes: " << cuda.describe(buffer.result());
}

// NCCL registers GPU buffers with NCCL_PTR_CUDA; a refusal is a failure: no GPU byte can move.
void regGpu(Peer& peer, void* comm, const DeviceBuffer& buffer, void** mhandle) {
  ASSERT_EQ(peer.props.ptrSupport & abi::kPtrCuda, abi::kPtrCuda)
      << "the plugin offers no GPU memory on device " << peer.dev
      << " (ptrSupport=" << peer.props.ptrSupport << "): " << ptrSupportReason(peer);
  peer.resetWarnings();
  *mhandle = nullptr;
  abi::Result result = peer.net->regMr(comm, buffer.at(0), buffer.size(), abi::kPtrCuda, mhandle);
  std::vector<std::string> warnings = peer.warningTexts();
  ASSERT_EQ(result, abi::kSuccess)
      << "no provider took the GPU memory: regMr(NCCL_PTR_CUDA) of " << buffer.size()
      << " bytes returned " << result << (warnings.empty() ? "" : ": " + warnings.back());
  ASSERT_NE(*mhandle, nullptr);
}

enum class Role { kSender, kReceiver };

// One process's end of a two-process check: the driver, its comm (a receiver's also the listen
// comm it came from) and one GPU buffer registered on that comm; where asked, also a host buffer
// of the same size registered on it.
struct GpuEnd {
  Role role = Role::kSender;
  CudaApi cuda;
  std::unique_ptr<DeviceBuffer> buffer;
  std::unique_ptr<HostBuffer> host;
  void* listen = nullptr;
  void* comm = nullptr;
  void* mh = nullptr;
  void* hostMh = nullptr;
};

enum class HostToo { kNo, kYes };

// Opens the driver, connects to (sender) or accepts (receiver) the other process, and allocates
// and registers the buffers of `bytes`.
void openEnd(Peer& peer, Role role, size_t bytes, GpuEnd* end, HostToo hostToo = HostToo::kNo) {
  end->role = role;
  ASSERT_NO_FATAL_FAILURE(openCuda(end->cuda));
  if (role == Role::kSender) {
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &end->comm));
  } else {
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &end->listen, &end->comm));
  }
  end->buffer = std::make_unique<DeviceBuffer>(end->cuda, bytes);
  ASSERT_NO_FATAL_FAILURE(allocated(end->cuda, *end->buffer));
  ASSERT_NO_FATAL_FAILURE(regGpu(peer, end->comm, *end->buffer, &end->mh));
  if (hostToo == HostToo::kYes) {
    end->host = std::make_unique<HostBuffer>(bytes);
    ASSERT_NO_FATAL_FAILURE(
        regHost(peer, end->comm, end->host->data(), end->host->size(), &end->hostMh));
  }
}

void closeEnd(Peer& peer, GpuEnd& end) {
  dereg(peer, end.comm, end.mh);
  if (end.hostMh != nullptr) dereg(peer, end.comm, end.hostMh);
  if (end.role == Role::kSender) {
    closeSend(peer, end.comm);
  } else {
    closeRecv(peer, end.comm);
    closeListen(peer, end.listen);
  }
}

// Copies a received message of `length` bytes at `offset`, and the `guard` bytes after it, back
// from the GPU: the message must carry pattern `message`, the guard bytes their sentinel.
void checkGpuBytes(const DeviceBuffer& buffer, size_t offset, size_t length, size_t guard,
                   uint64_t message, Moved moved) {
  std::vector<uint8_t> bytes;
  int result = buffer.read(offset, length + guard, &bytes);
  ASSERT_EQ(result, 0) << "cuMemcpyDtoH failed with CUDA error " << result;
  ::testing::AssertionResult same = verifyPattern(bytes.data(), length, message);
  ASSERT_TRUE(same) << "GPU bytes wrong after the transfer: " << same.message();
  ::testing::AssertionResult kept = verifySentinel(bytes.data() + length, guard, kSentinel);
  ASSERT_TRUE(kept) << "GPU bytes written past the message: " << kept.message();
  recordVerified(moved, length);
}

// Receive side of one message into GPU memory: checks what test and iflush say, then the bytes
// (checkGpuBytes).
void checkReceived(Peer& peer, void* comm, const DeviceBuffer& buffer, void* mhandle, size_t offset,
                   int expected, int received, size_t guard, uint64_t message, bool readFlush,
                   Moved moved = Moved::kGpuToGpu) {
  ASSERT_EQ(received, expected) << "test reported " << received << " bytes";
  void* data[1] = {buffer.at(offset)};
  int sizes[1] = {received};
  void* handles[1] = {mhandle};
  void* flush = reinterpret_cast<void*>(0x1);
  ASSERT_EQ(peer.net->iflush(comm, 1, data, sizes, handles, &flush), abi::kSuccess);
  if (received > 0 && readFlush) {
    ASSERT_NE(flush, nullptr) << "NCCL_FABRIC_GDR_FLUSH=read: a GPU receive needs a flush read";
  } else {
    ASSERT_EQ(flush, nullptr) << (received == 0 ? "an empty receive needs no flush"
                                                : "NCCL_FABRIC_GDR_FLUSH=cuda flushes at once");
  }
  if (flush != nullptr) {
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, flush, nullptr));
  }
  ASSERT_NO_FATAL_FAILURE(
      checkGpuBytes(buffer, offset, static_cast<size_t>(expected), guard, message, moved));
}

class GpuCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    report_ = "/tmp/nnf-gpu-check-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".report";
    unlink(report_.c_str());
    env_.unset("NNF_TEST_PROVIDER");  // the harness would set up a provider of its own
    env_.unset("FI_PROVIDER");        // it would hide the provider underneath
    env_.set("FI_PROVIDER_PATH", efaRulesDir());
    env_.set("NCCL_FABRIC_PROVIDER", "efa");
    env_.set("NNF_EFA_RULES_BASE", "shm");
    env_.set("NNF_EFA_RULES_HMEM_BASE", "1");
    env_.set("NNF_EFA_RULES_REORDER", "1");
    env_.set("NNF_EFA_RULES_REPORT", report_);
    env_.unset("NNF_EFA_RULES_REFUSE");
    env_.unset("NCCL_PROTO");
    // The real driver by name: the plugin, the provider and the check share its instance.
    env_.set("NCCL_FABRIC_CUDA_LIBRARY", "libcuda.so.1");
    env_.set("NCCL_FABRIC_GDR", "auto");
    env_.set("NCCL_FABRIC_GDR_FLUSH", "read");
    if (g_driver < 0) GTEST_FAIL() << "not run: the CUDA driver check failed (its reason above)";
  }
  void TearDown() override {
    std::vector<std::string> lines = readEfaRulesReport(report_);
    unlink(report_.c_str());
    EXPECT_TRUE(lines.empty()) << "the plugin broke " << lines.size()
                               << " EFA rule(s), first: " << (lines.empty() ? "" : lines[0]) << "\n"
                               << joined(lines);
  }

  // Every size of kSweepSizes (or `sizes`), one message at a time, GPU to GPU.
  void sweep(int pass, const std::vector<int>& sizes, bool readFlush);

  ScopedEnv env_;
  std::string report_;
};

// The driver and the GPU, before anything else: load, allocate, fill, copy back, compare.
TEST_F(GpuCheck, A_CudaDriverAllocatesFillsAndCopiesBack) {
  runOneProcess(
      [](Peer&) {
        CudaApi cuda;
        ASSERT_NO_FATAL_FAILURE(openCuda(cuda));
        printf("[ GPU ] %s, driver %d, %d GPU(s), GPU 0: %s\n", cuda.libraryPath().c_str(),
               cuda.driverVersion(), cuda.deviceCount(), cuda.deviceName().c_str());
        DeviceBuffer buffer(cuda, kCapacity);
        ASSERT_NO_FATAL_FAILURE(allocated(cuda, buffer));
        ASSERT_TRUE(cuda.isDeviceMemory(buffer.address()))
            << "the driver does not call its own allocation device memory";
        ASSERT_EQ(buffer.fillPattern(0, kCapacity, 7), 0);
        std::vector<uint8_t> bytes;
        ASSERT_EQ(buffer.read(0, kCapacity, &bytes), 0);
        ::testing::AssertionResult same = verifyPattern(bytes.data(), kCapacity, 7);
        ASSERT_TRUE(same) << "the GPU does not keep what was copied to it: " << same.message();
      },
      kTimeoutSec);
  g_driver = HasFailure() ? -1 : 1;
}

// libfabric itself: shm must register cuMemAlloc'd memory as FI_HMEM_CUDA. It cannot without
// CUDA support built in (--with-cuda) and a CUDA runtime it can load (libcudart.so).
TEST_F(GpuCheck, B_LibfabricShmRegistersCudaMemory) {
  runOneProcess(
      [](Peer&) {
        CudaApi cuda;
        ASSERT_NO_FATAL_FAILURE(openCuda(cuda));
        DeviceBuffer buffer(cuda, kMiB);
        ASSERT_NO_FATAL_FAILURE(allocated(cuda, buffer));
        Dl_info where{};
        dladdr(reinterpret_cast<void*>(&fi_getinfo), &where);
        std::string library = std::string("libfabric ") + std::to_string(FI_MAJOR(fi_version())) +
                              "." + std::to_string(FI_MINOR(fi_version())) + " (" +
                              (where.dli_fname != nullptr ? where.dli_fname : "?") + ")";
        fi_info* info = nullptr;
        int rc = getShmHmemInfo(&info);
        ASSERT_EQ(rc, 0) << library << ": shm offers no FI_HMEM endpoint: " << fi_strerror(-rc);
        fid_fabric* fabric = nullptr;
        fid_domain* domain = nullptr;
        ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
        ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
        iovec range{buffer.at(0), buffer.size()};
        fi_mr_attr attr{};
        attr.mr_iov = &range;
        attr.iov_count = 1;
        attr.access = FI_SEND | FI_RECV | FI_READ | FI_REMOTE_READ;
        attr.iface = FI_HMEM_CUDA;
        attr.device.cuda = 0;
        fid_mr* mr = nullptr;
        int registered = fi_mr_regattr(domain, &attr, 0, &mr);
        EXPECT_EQ(registered, 0) << library
                                 << " refuses CUDA memory on shm: " << fi_strerror(-registered)
                                 << " (" << registered
                                 << "); it needs --with-cuda and a loadable libcudart.so "
                                 << "(FI_LOG_LEVEL=info names what it could not load)";
        if (mr != nullptr) fi_close(&mr->fid);
        // What shm answers to the ban on CUDA calls decides test C below; printed for the record.
        bool opened = false;
        rc = askCudaCallBan(domain, info, &opened);
        std::string ban = !opened   ? "no endpoint"
                          : rc == 0 ? "accepted"
                                    : std::string("refused: ") + fi_strerror(-rc);
        printf(
            "[ GPU ] %s: shm FI_HMEM_CUDA registration of cuMemAlloc memory: %s; "
            "FI_OPT_CUDA_API_PERMITTED=false %s\n",
            library.c_str(), registered == 0 ? "ok" : fi_strerror(-registered), ban.c_str());
        fi_close(&domain->fid);
        fi_close(&fabric->fid);
        fi_freeinfo(info);
      },
      kTimeoutSec);
}

// The plugin on plain shm with CUDA: shm cannot promise to make no CUDA calls, so the plugin
// must offer host memory only and say why in one WARN (or, should shm accept the ban, offer CUDA).
TEST_F(GpuCheck, C_PlainShmOffersGpuMemoryOnlyIfItAcceptsTheCudaCallBan) {
  env_.unset("FI_PROVIDER_PATH");
  env_.set("FI_PROVIDER", "shm");
  env_.set("NCCL_FABRIC_PROVIDER", "shm");
  runOneProcess(
      [](Peer& peer) {
        CudaApi cuda;
        ASSERT_NO_FATAL_FAILURE(openCuda(cuda));
        fi_info* info = nullptr;
        ASSERT_EQ(getShmHmemInfo(&info), 0);
        fid_fabric* fabric = nullptr;
        fid_domain* domain = nullptr;
        ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
        ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
        bool opened = false;
        bool banAccepted = askCudaCallBan(domain, info, &opened) == 0;
        ASSERT_TRUE(opened) << "no shm endpoint";
        fi_close(&domain->fid);
        fi_close(&fabric->fid);
        fi_freeinfo(info);
        if (banAccepted) {
          EXPECT_EQ(peer.props.ptrSupport & abi::kPtrCuda, abi::kPtrCuda) << ptrSupportReason(peer);
        } else {
          EXPECT_EQ(peer.props.ptrSupport & abi::kPtrCuda, 0)
              << "shm refuses FI_OPT_CUDA_API_PERMITTED=false, yet the plugin offers GPU memory";
          bool named = false;
          for (const std::string& line : peer.warningTexts())
            named = named || line.find("FI_OPT_CUDA_API_PERMITTED") != std::string::npos;
          EXPECT_TRUE(named) << "no WARN names FI_OPT_CUDA_API_PERMITTED:\n"
                             << joined(peer.warningTexts());
        }
      },
      kTimeoutSec);
}

void GpuCheck::sweep(int pass, const std::vector<int>& sizes, bool readFlush) {
  for (int size : sizes) g_expectedGpuBytes += static_cast<uint64_t>(size);
  auto sender = [&](Peer& peer) {
    GpuEnd end;
    ASSERT_NO_FATAL_FAILURE(openEnd(peer, Role::kSender, kCapacity, &end));
    DeviceBuffer& buffer = *end.buffer;
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE("message " + std::to_string(i) + ": " + std::to_string(sizes[i]) + " bytes");
      Placement where = place(i, sizes[i]);
      ASSERT_EQ(buffer.fillPattern(where.offset, sizes[i], messageId(pass, i)), 0);
      ASSERT_TRUE(peer.channel->wait(kOpTimeoutSec));  // the receive is posted
      void* request;
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, end.comm, buffer.at(where.offset), sizes[i], kTag, end.mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
      ASSERT_TRUE(peer.channel->wait(kOpTimeoutSec));  // checked: the buffer may be reused
    }
    closeEnd(peer, end);
  };
  auto receiver = [&](Peer& peer) {
    GpuEnd end;
    ASSERT_NO_FATAL_FAILURE(openEnd(peer, Role::kReceiver, kCapacity, &end));
    DeviceBuffer& buffer = *end.buffer;
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE("message " + std::to_string(i) + ": " + std::to_string(sizes[i]) + " bytes");
      Placement where = place(i, sizes[i]);
      recordExpected(Moved::kGpuToGpu, static_cast<uint64_t>(sizes[i]));
      ASSERT_EQ(buffer.fillByte(where.offset, sizes[i] + where.guard, kSentinel), 0);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, end.comm, buffer.at(where.offset), where.capacity,
                                       kTag, end.mh, &request));
      ASSERT_TRUE(peer.channel->signal());
      int received = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &received));
      ASSERT_NO_FATAL_FAILURE(checkReceived(peer, end.comm, buffer, end.mh, where.offset, sizes[i],
                                            received, where.guard, messageId(pass, i), readFlush));
      ASSERT_TRUE(peer.channel->signal());
    }
    closeEnd(peer, end);
  };
  runTwoProcesses(sender, receiver, kTimeoutSec);
}

// Every size from 1 byte to 64 MiB (and empty), GPU to GPU, flushed by an RDMA read.
TEST_F(GpuCheck, D_EverySizeGpuToGpuWithReadFlush) {
  sweep(1, kSweepSizes, /*readFlush=*/true);
}

// The same with cuFlushGPUDirectRDMAWrites as the flush (NCCL_FABRIC_GDR_FLUSH=cuda).
TEST_F(GpuCheck, E_GpuToGpuWithCudaFlush) {
  env_.set("NCCL_FABRIC_GDR_FLUSH", "cuda");
  sweep(2, kCudaFlushSizes, /*readFlush=*/false);
}

// Eight messages in flight at once, as NCCL keeps its steps in flight, completions reordered.
TEST_F(GpuCheck, F_EightGpuMessagesInFlight) {
  constexpr int kInFlight = 8;
  constexpr int kRounds = 4;
  const std::vector<int> sizes = {2 << 20,       1,      4096, (1 << 20) + 7, 64,
                                  (2 << 20) - 1, 300000, 65536};
  auto sizeOf = [&](int round, int k) { return sizes[(k + round) % sizes.size()]; };
  for (int round = 0; round < kRounds; ++round)
    for (int k = 0; k < kInFlight; ++k)
      g_expectedGpuBytes += static_cast<uint64_t>(sizeOf(round, k));
  auto message = [](int round, int k) {
    return messageId(3, static_cast<size_t>(round * 100 + k));
  };
  auto sender = [&](Peer& peer) {
    GpuEnd end;
    ASSERT_NO_FATAL_FAILURE(openEnd(peer, Role::kSender, kCapacity, &end));
    DeviceBuffer& buffer = *end.buffer;
    for (int round = 0; round < kRounds; ++round) {
      for (int k = 0; k < kInFlight; ++k)
        ASSERT_EQ(buffer.fillPattern(k * kSlot, sizeOf(round, k), message(round, k)), 0);
      ASSERT_TRUE(peer.channel->wait(kOpTimeoutSec));
      std::vector<void*> requests(kInFlight);
      for (int k = 0; k < kInFlight; ++k)
        ASSERT_NO_FATAL_FAILURE(postSend(peer, end.comm, buffer.at(k * kSlot), sizeOf(round, k),
                                         kTag, end.mh, &requests[k]));
      std::vector<int> done;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &done));
      ASSERT_TRUE(peer.channel->wait(kOpTimeoutSec));
    }
    closeEnd(peer, end);
  };
  auto receiver = [&](Peer& peer) {
    GpuEnd end;
    ASSERT_NO_FATAL_FAILURE(openEnd(peer, Role::kReceiver, kCapacity, &end));
    DeviceBuffer& buffer = *end.buffer;
    for (int round = 0; round < kRounds; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      std::vector<void*> requests(kInFlight);
      for (int k = 0; k < kInFlight; ++k) {
        recordExpected(Moved::kGpuToGpu, static_cast<uint64_t>(sizeOf(round, k)));
        ASSERT_EQ(buffer.fillByte(k * kSlot, sizeOf(round, k) + kGuard, kSentinel), 0);
        ASSERT_NO_FATAL_FAILURE(postRecv(peer, end.comm, buffer.at(k * kSlot),
                                         static_cast<int>(kSlot - kGuard), kTag, end.mh,
                                         &requests[k]));
      }
      ASSERT_TRUE(peer.channel->signal());
      std::vector<int> received;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &received));
      for (int k = 0; k < kInFlight; ++k) {
        SCOPED_TRACE("receive " + std::to_string(k) + " of the round (posting order)");
        ASSERT_NO_FATAL_FAILURE(checkReceived(peer, end.comm, buffer, end.mh, k * kSlot,
                                              sizeOf(round, k), received[k], kGuard,
                                              message(round, k), true));
      }
      ASSERT_TRUE(peer.channel->signal());
    }
    closeEnd(peer, end);
  };
  runTwoProcesses(sender, receiver, kTimeoutSec);
}

// Grouped receives (irecv with n > 1, up to maxRecvs): each GPU buffer gets the send with its
// tag, whatever order the sends come in; one iflush covers the group.
TEST_F(GpuCheck, G_GroupedReceivesIntoGpuBuffers) {
  const std::vector<int> table = {1 << 20, 0, 7, 65539, 4096, 3 << 20, 1, 256};
  constexpr int kRounds = 3;
  // Group sizes: maxRecvs, 2, maxRecvs; sizes rotate through the table per round.
  auto sizeOf = [&](int round, int k) { return table[(k + 3 * round) % table.size()]; };
  auto countOf = [](int round, int maxRecvs) { return round == 1 ? 2 : maxRecvs; };
  auto tagOf = [](int k) { return 200 + 5 * k; };
  auto message = [](int round, int k) {
    return messageId(4, static_cast<size_t>(round * 100 + k));
  };
  auto sender = [&](Peer& peer) {
    const int maxRecvs = peer.props.maxRecvs;
    GpuEnd end;
    ASSERT_NO_FATAL_FAILURE(openEnd(peer, Role::kSender, kCapacity, &end));
    DeviceBuffer& buffer = *end.buffer;
    for (int round = 0; round < kRounds; ++round) {
      const int n = countOf(round, maxRecvs);
      for (int k = 0; k < n; ++k)
        ASSERT_EQ(buffer.fillPattern(k * kSlot, sizeOf(round, k), message(round, k)), 0);
      ASSERT_TRUE(peer.channel->wait(kOpTimeoutSec));
      std::vector<void*> requests;
      // Reversed and rotated: neither the buffer order nor its reverse.
      for (int j = 0; j < n; ++j) {
        int k = (n - 1 - j + round) % n;
        void* request;
        ASSERT_NO_FATAL_FAILURE(postSend(peer, end.comm, buffer.at(k * kSlot), sizeOf(round, k),
                                         tagOf(k), end.mh, &request));
        requests.push_back(request);
      }
      std::vector<int> done;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &done));
      ASSERT_TRUE(peer.channel->wait(kOpTimeoutSec));
    }
    closeEnd(peer, end);
  };
  auto receiver = [&](Peer& peer) {
    const int maxRecvs = peer.props.maxRecvs;
    ASSERT_GE(maxRecvs, 2) << "the device reports maxRecvs=" << maxRecvs
                           << ": grouped receives cannot be checked";
    ASSERT_LE(maxRecvs * kSlot, kCapacity);
    GpuEnd end;
    ASSERT_NO_FATAL_FAILURE(openEnd(peer, Role::kReceiver, kCapacity, &end));
    DeviceBuffer& buffer = *end.buffer;
    for (int round = 0; round < kRounds; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const int n = countOf(round, maxRecvs);
      std::vector<void*> data(n), handles(n, end.mh);
      std::vector<int> capacities(n, static_cast<int>(kSlot - kGuard)), tags(n);
      for (int k = 0; k < n; ++k) {
        recordExpected(Moved::kGpuToGpu, static_cast<uint64_t>(sizeOf(round, k)));
        ASSERT_EQ(buffer.fillByte(k * kSlot, sizeOf(round, k) + kGuard, kSentinel), 0);
        data[k] = buffer.at(k * kSlot);
        tags[k] = tagOf(k);
      }
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecvGroup(peer, end.comm, n, data.data(), capacities.data(),
                                            tags.data(), handles.data(), &request));
      ASSERT_TRUE(peer.channel->signal());
      std::vector<int> received(n, -1);
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, received.data()));
      bool anyData = false;
      for (int k = 0; k < n; ++k) {
        ASSERT_EQ(received[k], sizeOf(round, k)) << "buffer " << k << " (tag " << tagOf(k) << ")";
        anyData = anyData || received[k] > 0;
      }
      void* flush = reinterpret_cast<void*>(0x1);
      ASSERT_EQ(peer.net->iflush(end.comm, n, data.data(), received.data(), handles.data(), &flush),
                abi::kSuccess);
      if (anyData) {
        ASSERT_NE(flush, nullptr) << "a grouped GPU receive needs its flush read";
      }
      if (flush != nullptr) {
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, flush, nullptr));
      }
      for (int k = 0; k < n; ++k) {
        SCOPED_TRACE("buffer " + std::to_string(k));
        ASSERT_NO_FATAL_FAILURE(checkGpuBytes(buffer, k * kSlot, static_cast<size_t>(received[k]),
                                              kGuard, message(round, k), Moved::kGpuToGpu));
      }
      ASSERT_TRUE(peer.channel->signal());
    }
    closeEnd(peer, end);
  };
  // The parent cannot ask the plugin for maxRecvs: its floor counts groups of 2.
  for (int round = 0; round < kRounds; ++round)
    for (int k = 0; k < countOf(round, 2); ++k)
      g_expectedGpuBytes += static_cast<uint64_t>(sizeOf(round, k));
  runTwoProcesses(sender, receiver, kTimeoutSec);
}

// GPU to host and host to GPU on one connection, as NCCL does when one side stages in host
// memory: host receives need no flush, GPU receives do.
TEST_F(GpuCheck, H_GpuToHostAndHostToGpu) {
  const std::vector<int> sizes = {1, 64, 4096, 65537, 1 << 20, 8 << 20};
  auto sender = [&](Peer& peer) {
    GpuEnd end;
    ASSERT_NO_FATAL_FAILURE(openEnd(peer, Role::kSender, 16 * kMiB, &end, HostToo::kYes));
    DeviceBuffer& gpu = *end.buffer;
    HostBuffer& host = *end.host;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (bool fromGpu : {true, false}) {
        uint64_t message = messageId(5, 2 * i + (fromGpu ? 0 : 1));
        if (fromGpu) {
          ASSERT_EQ(gpu.fillPattern(0, sizes[i], message), 0);
        } else {
          fillPattern(host.data(), sizes[i], message);
        }
        ASSERT_TRUE(peer.channel->wait(kOpTimeoutSec));
        void* request;
        ASSERT_NO_FATAL_FAILURE(postSend(peer, end.comm, fromGpu ? gpu.at(0) : host.data(),
                                         sizes[i], kTag, fromGpu ? end.mh : end.hostMh, &request));
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
        ASSERT_TRUE(peer.channel->wait(kOpTimeoutSec));
      }
    }
    closeEnd(peer, end);
  };
  auto receiver = [&](Peer& peer) {
    GpuEnd end;
    ASSERT_NO_FATAL_FAILURE(openEnd(peer, Role::kReceiver, 16 * kMiB, &end, HostToo::kYes));
    DeviceBuffer& gpu = *end.buffer;
    HostBuffer& host = *end.host;
    for (size_t i = 0; i < sizes.size(); ++i) {
      // A GPU send lands in host memory, a host send in GPU memory.
      for (bool fromGpu : {true, false}) {
        SCOPED_TRACE(std::to_string(sizes[i]) + " bytes " +
                     (fromGpu ? "GPU to host" : "host to GPU"));
        uint64_t message = messageId(5, 2 * i + (fromGpu ? 0 : 1));
        size_t length = static_cast<size_t>(sizes[i]);
        recordExpected(fromGpu ? Moved::kGpuToHost : Moved::kHostToGpu, length);
        if (fromGpu) {
          fillSentinel(host.data(), length + kGuard, kSentinel);
        } else {
          ASSERT_EQ(gpu.fillByte(0, length + kGuard, kSentinel), 0);
        }
        void* request;
        ASSERT_NO_FATAL_FAILURE(postRecv(peer, end.comm, fromGpu ? host.data() : gpu.at(0),
                                         static_cast<int>(16 * kMiB - kGuard), kTag,
                                         fromGpu ? end.hostMh : end.mh, &request));
        ASSERT_TRUE(peer.channel->signal());
        int received = -1;
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &received));
        if (fromGpu) {
          ASSERT_EQ(received, sizes[i]);
          void* data[1] = {host.data()};
          void* handles[1] = {end.hostMh};
          void* flush = reinterpret_cast<void*>(0x1);
          ASSERT_EQ(peer.net->iflush(end.comm, 1, data, &received, handles, &flush), abi::kSuccess);
          ASSERT_EQ(flush, nullptr) << "host memory needs no flush";
          ::testing::AssertionResult same = verifyPattern(host.data(), length, message);
          ASSERT_TRUE(same) << "GPU bytes wrong in host memory: " << same.message();
          ASSERT_TRUE(verifySentinel(host.data() + length, kGuard, kSentinel));
          recordVerified(Moved::kGpuToHost, length);
        } else {
          ASSERT_NO_FATAL_FAILURE(checkReceived(peer, end.comm, gpu, end.mh, 0, sizes[i], received,
                                                kGuard, message, /*readFlush=*/true,
                                                Moved::kHostToGpu));
        }
        ASSERT_TRUE(peer.channel->signal());
      }
    }
    closeEnd(peer, end);
  };
  runTwoProcesses(sender, receiver, kTimeoutSec);
}

// The verdict: PASS only when every check ran and passed and the receivers verified exactly
// the GPU bytes sent; otherwise FAIL with the reasons the processes recorded.
int verdict(int gtestResult) {
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  LedgerTotals totals = readLedger();
  std::vector<std::string> problems;
  if (gtestResult != 0 || unit.failed_test_count() > 0)
    problems.push_back(std::to_string(unit.failed_test_count()) + " of " +
                       std::to_string(unit.total_test_count()) + " checks failed");
  if (unit.test_to_run_count() != unit.total_test_count())
    problems.push_back("only " + std::to_string(unit.test_to_run_count()) + " of " +
                       std::to_string(unit.total_test_count()) +
                       " checks were selected: a partial run proves nothing");
  if (unit.skipped_test_count() > 0)
    problems.push_back(std::to_string(unit.skipped_test_count()) + " checks were skipped");
  if (totals.gpuToGpu == 0) {
    problems.push_back("no GPU byte moved through the plugin and was verified");
  } else if (totals.gpuToGpu < g_expectedGpuBytes) {
    problems.push_back(std::to_string(totals.gpuToGpu) + " GPU bytes verified, fewer than the " +
                       std::to_string(g_expectedGpuBytes) + " the checks send");
  }
  if (totals.verified != totals.expected)
    problems.push_back(std::to_string(totals.verified) + " of the " +
                       std::to_string(totals.expected) +
                       " bytes the receivers expected were verified");
  if (problems.empty()) {
    printf(
        "GPU CHECK PASSED: %d checks; %llu bytes in %llu messages moved GPU to GPU through the "
        "plugin (%s) and compared byte for byte after cuMemcpyDtoH; %llu bytes GPU to host, "
        "%llu host to GPU\n",
        unit.successful_test_count(), static_cast<unsigned long long>(totals.gpuToGpu),
        static_cast<unsigned long long>(totals.gpuMessages), pluginPath().c_str(),
        static_cast<unsigned long long>(totals.gpuToHost),
        static_cast<unsigned long long>(totals.hostToGpu));
    return 0;
  }
  std::string summary;
  for (const std::string& problem : problems) summary += (summary.empty() ? "" : "; ") + problem;
  printf("GPU CHECK FAILED: %s\n", summary.c_str());
  // The children's own reasons first; "exited with status" lines of the parent add nothing.
  std::vector<std::string> reasons;
  int notRun = 0;
  for (const std::string& line : totals.failures) {
    if (line.find("its failures are printed above") != std::string::npos) continue;
    if (line.find(": not run: ") != std::string::npos) {
      ++notRun;
      continue;
    }
    if (std::find(reasons.begin(), reasons.end(), line) == reasons.end()) reasons.push_back(line);
  }
  if (reasons.empty()) reasons = totals.failures;
  if (notRun > 0)
    reasons.push_back(std::to_string(notRun) +
                      " other checks not run: the CUDA driver check failed");
  const size_t kShown = 16;
  for (size_t i = 0; i < reasons.size() && i < kShown; ++i) printf("  - %s\n", reasons[i].c_str());
  if (reasons.size() > kShown) printf("  ... and %zu more (above)\n", reasons.size() - kShown);
  return 1;
}

}  // namespace
}  // namespace nnf::test::gpu

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  nnf::test::gpu::startLedger();
  ::testing::UnitTest::GetInstance()->listeners().Append(new nnf::test::gpu::FailureRecorder);
  int result = RUN_ALL_TESTS();
  return nnf::test::gpu::verdict(result);
}
