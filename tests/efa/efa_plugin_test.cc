// The plugin on the EFA-rules provider (tests/efa_rules): one test per EFA rule the plugin must
// keep, each failing when the plugin breaks it — the provider reports every broken rule to a
// file the test reads. Two processes, GPU buffers through the fake CUDA driver, completions
// reordered as SRD may deliver them.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/fake_cuda_controls.h"
#include "support/harness.h"
#include "support/known_failures.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x3f;

bool anyContains(const std::vector<std::string>& lines, const std::string& text) {
  for (const std::string& line : lines)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& line : lines) all += "  " + line + "\n";
  return all;
}

class EfaPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    // These tests always run on the EFA-rules stand-in: the known failures of provider efa.
    NNF_SKIP_KNOWN_FAILURE_ON("efa");
    report_ = "/tmp/nnf-efa-plugin-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".txt";
    unlink(report_.c_str());
    env_.unset("FI_PROVIDER");  // it would hide the provider underneath
    env_.set("FI_PROVIDER_PATH", efaRulesDir());
    env_.set("NCCL_FABRIC_PROVIDER", "efa");
    env_.set("NNF_EFA_RULES_BASE", "shm");
    env_.set("NNF_EFA_RULES_REORDER", "1");
    env_.set("FI_TCP_IFACE", "lo");
    env_.set("NCCL_FABRIC_CUDA_LIBRARY", fakeCudaLibrary());
    env_.set("NNF_EFA_RULES_REPORT", report_);
    env_.unset("NCCL_PROTO");
    env_.unset("NNF_EFA_RULES_REFUSE");
    env_.unset("NNF_EFA_RULES_SENDRECV_ORDER");
    env_.unset("NNF_EFA_RULES_TAG_BITS");
    // The stand-in's evidence that its rules were at work, checked at the end of each test.
    unlink(efaRulesStats().c_str());
    env_.set("NNF_EFA_RULES_STATS", efaRulesStats());
    writeEfaRulesStatsAtChildExit();
  }
  void TearDown() override {
    unlink(report_.c_str());
    EXPECT_TRUE(efaRulesEvidenceHolds(efaRulesStats()));
    unlink(efaRulesStats().c_str());
  }
  std::vector<std::string> report() const { return readEfaRulesReport(report_); }

  ScopedEnv env_;
  std::string report_;
};

void regGpu(Peer& peer, void* comm, HostBuffer& buffer, void** mh) {
  FakeControls fake;
  ASSERT_NO_FATAL_FAILURE(openFake(fakeCudaLibrary(), &fake));
  fake.declare(buffer.data(), buffer.size(), 0);
  ASSERT_EQ(peer.net->regMr(comm, buffer.data(), buffer.size(), abi::kPtrCuda, mh), abi::kSuccess);
}

// Every size from empty to 1 MiB, both ends in GPU memory (small ones too: inject would make the
// provider copy a device pointer with the CPU), and host buffers beside them; GPU receives are
// flushed. `expectReadFlush`: the flush is an RDMA read (else the CUDA call).
void gpuTransfers(bool expectReadFlush) {
  const std::vector<int> sizes = {0, 1, 8, 64, 65, 1000, 4032, 4096, 65536, 1 << 20};
  constexpr size_t kCapacity = 1 << 20;
  auto sender = [&](Peer& peer) {
    ASSERT_EQ(peer.props.ptrSupport & abi::kPtrCuda, abi::kPtrCuda);
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer gpu(kCapacity), host(kCapacity);
    void *gpuHandle, *hostHandle;
    ASSERT_NO_FATAL_FAILURE(regGpu(peer, comm, gpu, &gpuHandle));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &hostHandle));
    uint64_t message = 0;
    for (int size : sizes) {
      for (bool onGpu : {true, false}) {
        HostBuffer& buffer = onGpu ? gpu : host;
        fillPattern(buffer.data(), static_cast<size_t>(size), ++message);
        void* request;
        ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), size, kTag,
                                         onGpu ? gpuHandle : hostHandle, &request));
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
        ASSERT_TRUE(peer.channel->wait());  // received before the buffer is reused
      }
    }
    dereg(peer, comm, gpuHandle);
    dereg(peer, comm, hostHandle);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer gpu(kCapacity), host(kCapacity);
    void *gpuHandle, *hostHandle;
    ASSERT_NO_FATAL_FAILURE(regGpu(peer, comm, gpu, &gpuHandle));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &hostHandle));
    FakeControls fake;
    ASSERT_NO_FATAL_FAILURE(openFake(fakeCudaLibrary(), &fake));
    int flushesBefore = fake.flushCount();
    uint64_t message = 0;
    int gpuFlushes = 0;
    for (int size : sizes) {
      for (bool onGpu : {true, false}) {
        SCOPED_TRACE(std::to_string(size) + " bytes in " + (onGpu ? "GPU" : "host") + " memory");
        HostBuffer& buffer = onGpu ? gpu : host;
        void* handle = onGpu ? gpuHandle : hostHandle;
        fillSentinel(buffer.data(), kCapacity);
        void* request;
        ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), static_cast<int>(kCapacity),
                                         kTag, handle, &request));
        int received = -1;
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &received));
        ASSERT_EQ(received, size);
        EXPECT_TRUE(verifyPattern(buffer.data(), static_cast<size_t>(size), ++message));
        void* data[1] = {buffer.data()};
        int flushSizes[1] = {received};
        void* handles[1] = {handle};
        void* flush = reinterpret_cast<void*>(0x1);
        ASSERT_EQ(peer.net->iflush(comm, 1, data, flushSizes, handles, &flush), abi::kSuccess);
        if (onGpu && size > 0 && expectReadFlush) {
          ASSERT_NE(flush, nullptr) << "a GPU receive is flushed by an RDMA read";
        }
        if (!onGpu) {
          EXPECT_EQ(flush, nullptr);
        }
        if (flush != nullptr) {
          ASSERT_NO_FATAL_FAILURE(waitDone(peer, flush, nullptr));
        }
        if (onGpu && size > 0) ++gpuFlushes;
        ASSERT_TRUE(peer.channel->signal());
      }
    }
    EXPECT_EQ(fake.flushCount() - flushesBefore, expectReadFlush ? 0 : gpuFlushes);
    dereg(peer, comm, gpuHandle);
    dereg(peer, comm, hostHandle);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

// Init says what it decided: options set before enable, pointer support, DMA-BUF, the EFA
// environment defaults, the protocol auto chose (rdma: this NIC writes by the device, as a p5's
// does); nothing to warn about. Under rdma LL128 travels in RMA writes only: the message-ordering
// option, which libfabric 2.4 and later refuse (the stand-in too), is not asked for.
TEST_F(EfaPlugin, InitSetsEveryEfaOptionAndSaysSo) {
  runOneProcess([](Peer& peer) {
    std::vector<std::string> info = peer.infoTexts();
    for (const char* line :
         {"set FI_OPT_CUDA_API_PERMITTED=false", "set FI_OPT_SHARED_MEMORY_PERMITTED=false",
          "FI_EFA_USE_HUGE_PAGE", "set FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES=true",
          "FI_EFA_FORK_SAFE", "efa rules", "memory: DMA-BUF", "LL and LL128 protocols are safe",
          "RMA writes done by the device", "protocol rdma",
          NNF_HAVE_FI_MR_DMABUF ? "ptrSupport=7" : "ptrSupport=3"}) {
      EXPECT_TRUE(anyContains(info, line)) << "no INFO line with '" << line << "':\n"
                                           << joined(info);
    }
    EXPECT_FALSE(anyContains(info, "SENDRECV_IN_ORDER")) << joined(info);
    EXPECT_EQ(peer.props.ptrSupport & (abi::kPtrHost | abi::kPtrCuda),
              abi::kPtrHost | abi::kPtrCuda);
    EXPECT_EQ(getenv("NCCL_PROTO"), nullptr) << "ordering is guaranteed: LL/LL128 stay allowed";
    EXPECT_EQ(peer.warnings(), 0) << joined(peer.warningTexts());
  });
  EXPECT_TRUE(report().empty()) << joined(report());
}

// Descriptors on every post (data and connection set-up: FI_MR_LOCAL), no inject from device
// memory, options before enable, CUDA calls forbidden, the flush read kept on the NIC,
// 128-byte ordering: a run of GPU and host transfers breaks none of them.
TEST_F(EfaPlugin, GpuAndHostTransfersOfEverySizeKeepEveryRule) {
  gpuTransfers(/*expectReadFlush=*/true);
  EXPECT_TRUE(report().empty()) << "rules broken:\n" << joined(report());
}

// Bytes this process read by RMA on the EFA-rules provider so far (every NIC).
uint64_t readByRma() {
  EXPECT_TRUE(writeEfaRulesStats());
  uint64_t read = 0;
  for (const auto& [domain, traffic] : readEfaRulesStats(efaRulesStats(), getpid())) {
    read += traffic.read;
  }
  return read;
}

// Small messages from host memory sent before their receives are posted go eagerly into the
// receiver's bounce entries; those received into GPU memory are copied there by the NIC (an RDMA
// read from the receiver's own endpoint: the provider counts the bytes), never by the CPU, and
// every byte arrives.
TEST_F(EfaPlugin, EagerMessagesForGpuBuffersAreCopiedByTheNic) {
  env_.set("NCCL_FABRIC_PROTOCOL", "rdma");
  const std::vector<int> sizes = {8, 1, 4096, 8192, 100, 0, 5000, 64};
  constexpr size_t kSlot = 16384;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer sources(sizes.size() * kSlot), host(kSlot);
    void *sourcesHandle, *hostHandle;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, sources.data(), sources.size(), &sourcesHandle));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &hostHandle));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    // Sends go eagerly while the receiver has been quiet for 1 ms (rdma::kEagerQuietNs).
    usleep(20000);
    std::vector<void*> requests;
    for (size_t i = 0; i < sizes.size(); ++i) {
      uint8_t* data = sources.data() + i * kSlot;
      fillPattern(data, static_cast<size_t>(sizes[i]), 40 + i);
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizes[i], kTag, sourcesHandle, &request));
      requests.push_back(request);
    }
    // Eager: done before the receiver posts anything of their tag.
    std::vector<int> sent;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sent));
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, sourcesHandle);
    dereg(peer, comm, hostHandle);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer gpu(sizes.size() * kSlot), host(sizes.size() * kSlot);
    void *gpuHandle, *hostHandle;
    ASSERT_NO_FATAL_FAILURE(regGpu(peer, comm, gpu, &gpuHandle));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &hostHandle));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    // Progressing meanwhile, as NCCL's proxy does (shm completes a write once its target
    // progresses): the sender sends this once its eager sends have completed.
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    fillSentinel(gpu.data(), gpu.size());
    fillSentinel(host.data(), host.size());
    uint64_t readBefore = readByRma();
    uint64_t toGpu = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      bool onGpu = i % 2 == 0;
      SCOPED_TRACE(std::to_string(sizes[i]) + " bytes into " + (onGpu ? "GPU" : "host") +
                   " memory");
      uint8_t* data = (onGpu ? gpu : host).data() + i * kSlot;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, data, static_cast<int>(kSlot), kTag,
                                       onGpu ? gpuHandle : hostHandle, &request));
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
      EXPECT_EQ(size, sizes[i]);
      EXPECT_TRUE(verifyPattern(data, static_cast<size_t>(sizes[i]), 40 + i));
      EXPECT_TRUE(verifySentinel(data + sizes[i], kSlot - static_cast<size_t>(sizes[i])));
      if (onGpu) toGpu += static_cast<uint64_t>(sizes[i]);
    }
    EXPECT_EQ(readByRma() - readBefore, toGpu)
        << "the eager messages for GPU buffers were not (only) copied by RDMA reads";
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, gpuHandle);
    dereg(peer, comm, hostHandle);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
  EXPECT_TRUE(report().empty()) << "rules broken:\n" << joined(report());
}

// An eager message received into GPU memory is copied out of its bounce entry by an RDMA read,
// and the entry is the sender's again only once that read has completed, however long the NIC
// takes: the stand-in holds every read back 300 ms (NNF_EFA_RULES_HOLD_READS). With all 64
// entries full and 32 more sends waiting for credits, a receiver that returned the entries as
// it posted the reads would let those sends overwrite messages the reads had still to copy:
// the GPU buffers would get the newer bytes.
TEST_F(EfaPlugin, ABounceEntryIsNotReusedWhileTheNicStillCopiesOutOfIt) {
  env_.set("NCCL_FABRIC_PROTOCOL", "rdma");
  env_.set("NNF_EFA_RULES_HOLD_READS", "300");
  constexpr int kEntries = 64;  // rdma::kEagerEntries
  constexpr int kWindow = 32;   // receives in flight, and sends waiting behind the full entries
  constexpr int kMessages = kEntries + kWindow;
  constexpr size_t kSlot = 8192;
  auto sizeOf = [](int m) { return 64 + (m * 131) % 4000; };
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer sources(kMessages * kSlot), host(kSlot);
    void *sourcesHandle, *hostHandle;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, sources.data(), sources.size(), &sourcesHandle));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &hostHandle));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    usleep(20000);  // sends go eagerly once the receiver has been quiet for 1 ms
    auto sendRange = [&](int first, int last, std::vector<void*>* requests) {
      for (int m = first; m < last; ++m) {
        uint8_t* data = sources.data() + m * kSlot;
        fillPattern(data, static_cast<size_t>(sizeOf(m)), 700 + m);
        void* sent;
        ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizeOf(m), kTag, sourcesHandle, &sent));
        requests->push_back(sent);
      }
    };
    std::vector<void*> full, waiting;
    ASSERT_NO_FATAL_FAILURE(sendRange(0, kEntries, &full));
    std::vector<int> sent;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, full, &sent));  // eager: no receive is posted yet
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_NO_FATAL_FAILURE(sendRange(kEntries, kMessages, &waiting));  // no entry is free
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, waiting, &sent));
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, sourcesHandle);
    dereg(peer, comm, hostHandle);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer gpu(kWindow * kSlot), host(kMessages * kSlot);
    void *gpuHandle, *hostHandle;
    ASSERT_NO_FATAL_FAILURE(regGpu(peer, comm, gpu, &gpuHandle));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &hostHandle));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    // Progressing meanwhile, as NCCL's proxy does: the sender sends this once its entries are full.
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_TRUE(peer.channel->wait());  // 32 sends wait for entries
    fillSentinel(gpu.data(), gpu.size());
    fillSentinel(host.data(), host.size());
    // The first 32 messages into GPU memory: 32 reads held at once.
    std::vector<void*> reads(kWindow);
    for (int m = 0; m < kWindow; ++m) {
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, gpu.data() + m * kSlot, static_cast<int>(kSlot),
                                       kTag, gpuHandle, &reads[m]));
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, reads, &sizes));
    for (int m = 0; m < kWindow; ++m) {
      EXPECT_EQ(sizes[m], sizeOf(m)) << "message " << m;
      EXPECT_TRUE(verifyPattern(gpu.data() + m * kSlot, static_cast<size_t>(sizeOf(m)), 700 + m))
          << "message " << m << " in GPU memory is not what was sent: its bounce entry was "
          << "written again before the NIC had copied it out";
    }
    // The rest into host memory, the 32 that waited among them.
    for (int m = kWindow; m < kMessages; ++m) {
      uint8_t* data = host.data() + m * kSlot;
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, data, static_cast<int>(kSlot), kTag, hostHandle, &request));
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
      EXPECT_EQ(size, sizeOf(m)) << "message " << m;
      EXPECT_TRUE(verifyPattern(data, static_cast<size_t>(sizeOf(m)), 700 + m)) << "message " << m;
    }
    EXPECT_EQ(peer.warnings(), 0) << joined(peer.warningTexts());
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, gpuHandle);
    dereg(peer, comm, hostHandle);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
  EXPECT_TRUE(report().empty()) << "rules broken:\n" << joined(report());
}

// A small message from GPU memory never goes eagerly on EFA: the header and the message would go
// as one write of two buffers, which efa sends as an emulated packet copied with the first
// buffer's (host) memory type, a CPU read of GPU memory (issue 24, defect 1). It waits for its
// receive's descriptor and goes as a write by the NIC; every byte arrives.
TEST_F(EfaPlugin, SmallGpuSendsWaitForTheirDescriptors) {
  env_.set("NCCL_FABRIC_PROTOCOL", "rdma");
  const std::vector<int> sizes = {8, 1, 4096, 8192, 100, 5000, 64};
  constexpr size_t kSlot = 16384;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer gpu(sizes.size() * kSlot), host(kSlot);
    void *gpuHandle, *hostHandle;
    ASSERT_NO_FATAL_FAILURE(regGpu(peer, comm, gpu, &gpuHandle));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &hostHandle));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    // The receiver is quiet for far longer than rdma::kEagerQuietNs: host sends would go now.
    usleep(20000);
    std::vector<void*> requests;
    for (size_t i = 0; i < sizes.size(); ++i) {
      uint8_t* data = gpu.data() + i * kSlot;
      fillPattern(data, static_cast<size_t>(sizes[i]), 60 + i);
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizes[i], kTag, gpuHandle, &request));
      requests.push_back(request);
    }
    // Nothing can complete them before the receiver posts its receives.
    for (int round = 0; round < 200; ++round) {
      for (void* pending : requests) {
        if (pending == nullptr) continue;
        int done = 0;
        ASSERT_EQ(peer.net->test(pending, &done, nullptr), abi::kSuccess);
        ASSERT_EQ(done, 0) << "a GPU send completed before its receive was posted: it went eagerly";
      }
    }
    ASSERT_TRUE(peer.channel->signal());
    std::vector<int> sent;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sent));
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, gpuHandle);
    dereg(peer, comm, hostHandle);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer gpu(sizes.size() * kSlot), host(kSlot);
    void *gpuHandle, *hostHandle;
    ASSERT_NO_FATAL_FAILURE(regGpu(peer, comm, gpu, &gpuHandle));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &hostHandle));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, host.data(), 8, kTag + 1, hostHandle, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_TRUE(peer.channel->wait());
    fillSentinel(gpu.data(), gpu.size());
    std::vector<void*> requests;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, gpu.data() + i * kSlot, static_cast<int>(kSlot),
                                       kTag, gpuHandle, &request));
      requests.push_back(request);
    }
    std::vector<int> got;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &got));
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE(std::to_string(sizes[i]) + " bytes");
      uint8_t* data = gpu.data() + i * kSlot;
      EXPECT_EQ(got[i], sizes[i]);
      EXPECT_TRUE(verifyPattern(data, static_cast<size_t>(sizes[i]), 60 + i));
      EXPECT_TRUE(verifySentinel(data + sizes[i], kSlot - static_cast<size_t>(sizes[i])));
    }
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, gpuHandle);
    dereg(peer, comm, hostHandle);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
  EXPECT_TRUE(report().empty()) << "rules broken:\n" << joined(report());
}

// Without the in-order guarantee of the protocol's data NCCL must not run LL128; LL and Simple
// stay. Set where the user said nothing, once, naming the remedy; a user's LL128 is warned about
// (the provider then reports the torn-data risk), a user's LL is not.
TEST_F(EfaPlugin, RefusedWriteOrderingTurnsOffLL128Only) {
  env_.set("NNF_EFA_RULES_REFUSE", "write_in_order_aligned_128_bytes");
  runOneProcess([](Peer& peer) {
    ASSERT_NE(getenv("NCCL_PROTO"), nullptr);
    EXPECT_STREQ(getenv("NCCL_PROTO"), "^LL128");
    std::vector<std::string> warnings = peer.warningTexts();
    EXPECT_TRUE(
        anyContains(peer.infoTexts(), "refused FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES"))
        << joined(peer.infoTexts());
    EXPECT_EQ(warnings.size(), 1u) << "one WARN: " << joined(warnings);
    int said = 0;
    for (const std::string& text : warnings)
      said += text.find("NCCL_PROTO=^LL128") != std::string::npos;
    EXPECT_EQ(said, 1) << "one WARN naming what the plugin did: " << joined(warnings);
  });
  gpuTransfers(/*expectReadFlush=*/true);
  EXPECT_TRUE(report().empty()) << "with LL128 off nothing is at risk:\n" << joined(report());

  env_.set("NCCL_PROTO", "LL128");
  runOneProcess([](Peer& peer) {
    EXPECT_STREQ(getenv("NCCL_PROTO"), "LL128") << "the user's setting stays";
    EXPECT_TRUE(anyContains(peer.warningTexts(), "NCCL_PROTO=LL128 enables LL128"))
        << joined(peer.warningTexts());
  });
  env_.set("NCCL_PROTO", "LL,Simple");
  runOneProcess([](Peer& peer) {
    EXPECT_STREQ(getenv("NCCL_PROTO"), "LL,Simple");
    EXPECT_FALSE(anyContains(peer.warningTexts(), "NCCL_PROTO")) << joined(peer.warningTexts());
  });
}

// Under sendrecv LL128 travels in tagged messages: the message-ordering option is asked for, and
// its refusal (libfabric 2.4 and later, the stand-in's default) turns LL128 off, nothing more.
TEST_F(EfaPlugin, SendRecvAsksForMessageOrderingAndItsRefusalTurnsOffLL128Only) {
  env_.set("NCCL_FABRIC_PROTOCOL", "sendrecv");
  runOneProcess([](Peer& peer) {
    EXPECT_TRUE(
        anyContains(peer.infoTexts(), "refused FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES"))
        << joined(peer.infoTexts());
    EXPECT_EQ(peer.warnings(), 1) << joined(peer.warningTexts());
    EXPECT_FALSE(anyContains(peer.infoTexts(), "set FI_OPT_EFA_WRITE_IN_ORDER"))
        << "sendrecv writes nothing by RMA";
    EXPECT_STREQ(getenv("NCCL_PROTO"), "^LL128");
  });
  gpuTransfers(/*expectReadFlush=*/true);
  EXPECT_TRUE(report().empty()) << joined(report());
  env_.set("NNF_EFA_RULES_SENDRECV_ORDER", "1");  // a libfabric before 2.4
  env_.unset("NCCL_PROTO");
  runOneProcess([](Peer& peer) {
    EXPECT_TRUE(
        anyContains(peer.infoTexts(), "set FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES"));
    EXPECT_EQ(getenv("NCCL_PROTO"), nullptr);
    EXPECT_EQ(peer.warnings(), 0) << joined(peer.warningTexts());
  });
}

// A provider that cannot promise to make no CUDA calls gets host memory only.
TEST_F(EfaPlugin, RefusedCudaApiControlMeansHostMemoryOnly) {
  env_.set("NNF_EFA_RULES_REFUSE", "cuda_api_permitted");
  runOneProcess([](Peer& peer) {
    EXPECT_EQ(peer.props.ptrSupport, abi::kPtrHost);
    EXPECT_TRUE(anyContains(peer.warningTexts(), "FI_OPT_CUDA_API_PERMITTED"))
        << joined(peer.warningTexts());
    EXPECT_TRUE(anyContains(peer.warningTexts(), "host memory only"));
  });
}

// Where the flush read could take the shared-memory path, flushes use the CUDA call instead.
TEST_F(EfaPlugin, RefusedSharedMemoryOptionFlushesWithTheCudaCall) {
  env_.set("NNF_EFA_RULES_REFUSE", "shared_memory_permitted");
  gpuTransfers(/*expectReadFlush=*/false);
  EXPECT_TRUE(report().empty()) << "no flush read may go to our own endpoint:\n"
                                << joined(report());
}

// A provider that matches fewer tag bits than the plugin uses (cxi: 48) is refused at init,
// with the reason, instead of mismatching messages later.
TEST_F(EfaPlugin, NarrowTagFormatIsRefusedAtInit) {
  env_.set("NNF_EFA_RULES_TAG_BITS", "48");
  // Not runOneProcess: it fails the test when init fails, which is what must happen here.
  runBare([] {
    tools::PluginLibrary library(pluginPath());
    Peer peer;
    peer.resetWarnings();
    EXPECT_NE(library.net().init(testLogger), abi::kSuccess) << "init must fail";
    EXPECT_TRUE(anyContains(peer.warningTexts(), "48 tag bits")) << "and say why";
  });
  EXPECT_TRUE(report().empty()) << joined(report());
}

// DMA-BUF (libfabric 2.x builds): a registration that starts 64 KiB into the exported buffer
// reaches the provider as base_addr = start of the DMA-BUF, offset = 64 KiB (the provider checks
// that base_addr + offset is the device memory declared); a provider that cannot import DMA-BUFs
// is answered by one fallback to registration by address, with one WARN, and data still moves.
void dmaBufTransfer(bool providerImports) {
  constexpr size_t kOffset = 64 << 10;
  constexpr int kSize = 512 << 10;
  auto sender = [&](Peer& peer) {
    ASSERT_EQ(peer.props.ptrSupport & abi::kPtrDmaBuf, abi::kPtrDmaBuf);
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer whole(kOffset + kSize);
    uint8_t* start = static_cast<uint8_t*>(whole.data()) + kOffset;
    FakeControls fake;
    ASSERT_NO_FATAL_FAILURE(openFake(fakeCudaLibrary(), &fake));
    fake.declare(start, kSize, 0);  // exactly the registered range is device memory
    peer.resetWarnings();
    std::vector<void*> handles;
    for (int round = 0; round < 2; ++round) {
      int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);  // stands for the exported DMA-BUF
      ASSERT_GE(fd, 0);
      void* mh = nullptr;
      ASSERT_EQ(peer.net->regMrDmaBuf(comm, start, kSize, abi::kPtrCuda, kOffset, fd, &mh),
                abi::kSuccess);
      close(fd);
      handles.push_back(mh);
    }
    std::vector<std::string> warnings = peer.warningTexts();
    if (providerImports) {
      EXPECT_TRUE(warnings.empty()) << joined(warnings);
    } else {
      ASSERT_EQ(warnings.size(), 1u) << "one WARN for the fallback, not one per registration:\n"
                                     << joined(warnings);
      EXPECT_NE(warnings[0].find("registering GPU memory by address"), std::string::npos);
    }
    fillPattern(start, kSize, 99);
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, start, kSize, kTag, handles[1], &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    for (void* mh : handles) dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    fillSentinel(buffer.data(), kSize);
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), kSize, kTag, mh, &request));
    int size = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
    EXPECT_EQ(size, kSize);
    EXPECT_TRUE(verifyPattern(buffer.data(), kSize, 99));
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

// A peer's write that fails at our NIC is an error completion without a context (EFA's
// unsolicited write receive: nothing was posted for it), its immediate data the write's. The
// stand-in fails every write with data that reaches the receiver
// (NNF_EFA_RULES_REMOTE_WRITE_ERRORS=1 in the receiver only): the comm the immediate data names
// fails, with a WARN saying why, instead of its receive waiting for ever.
TEST_F(EfaPlugin, RemoteWriteErrorWithoutContextFailsTheCommItNames) {
  env_.set("NCCL_FABRIC_PROTOCOL", "rdma");
  env_.set("NNF_TEST_ENV_RECEIVER", "NNF_EFA_RULES_REMOTE_WRITE_ERRORS=1");
  constexpr int kSize = 65536;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer host(kSize);
    void* handle;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &handle));
    fillPattern(host.data(), kSize, 7);
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, host.data(), kSize, kTag, handle, &request));
    // The write succeeds here; whatever the send's end, it comes.
    Outcome outcome = pollRequest(peer, request, nullptr);
    EXPECT_FALSE(outcome.timedOut);
    ASSERT_TRUE(peer.channel->wait());  // the receiver has seen its receive fail
    dereg(peer, comm, handle);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer host(kSize);
    void* handle;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, host.data(), host.size(), &handle));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, host.data(), kSize, kTag, handle, &request));
    Outcome outcome = pollRequest(peer, request, nullptr);
    EXPECT_FALSE(outcome.timedOut) << "the receive waited for a write that failed at its NIC";
    EXPECT_NE(outcome.result, abi::kSuccess);
    EXPECT_TRUE(anyContains(peer.warningTexts(), "a write of the peer's failed at NIC"))
        << joined(peer.warningTexts());
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, handle);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
  EXPECT_TRUE(report().empty()) << "rules broken:\n" << joined(report());
}

TEST_F(EfaPlugin, DmaBufRegistrationWithAnOffsetReachesTheProviderRight) {
  if (!NNF_HAVE_FI_MR_DMABUF)
    GTEST_SKIP() << "built against libfabric headers without FI_MR_DMABUF";
  env_.set("NNF_EFA_RULES_DMABUF", "1");
  dmaBufTransfer(/*providerImports=*/true);
  EXPECT_TRUE(report().empty()) << joined(report());
}

TEST_F(EfaPlugin, RefusedDmaBufFallsBackToAddressRegistrationOnce) {
  if (!NNF_HAVE_FI_MR_DMABUF)
    GTEST_SKIP() << "built against libfabric headers without FI_MR_DMABUF";
  env_.set("NNF_EFA_RULES_DMABUF", "0");
  dmaBufTransfer(/*providerImports=*/false);
  EXPECT_TRUE(report().empty()) << joined(report());
}

}  // namespace
}  // namespace nnf::test
