// Many comms open at once between two processes, as NCCL's proxy opens every channel to every
// peer (and all-to-all / PXN one per remote rank): all listens, connects and accepts polled
// together, one verified message on each comm, then every comm closed. Bounds: no file
// descriptor per comm, and what the plugin itself allocates per
// open comm (counted by tests/alloc/alloc_counter.h: deterministic, whatever the machine's load).
// The resident size per comm is reported and bounded only generously: it includes what the
// provider queues while the two processes are starved of CPU (CI measured shm's at 46 KB a comm
// after a 2.4 s set-up on two busy cores, 4-12 KB on a quiet machine), which says nothing about
// the plugin. NNF_SCALE_COMMS sets the number of pairs (10,000 by default).
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "alloc/alloc_counter.h"
#include "protocol/rdma_eager.h"
#include "protocol/rdma_wire.h"
#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTag = 7;
constexpr int kSlot = 64;  // bytes per comm in the data buffers
// Wall times are reported; their bounds only catch a hang or a per-comm cost gone quadratic (a
// quiet machine takes 0.2-0.7 s for either, two busy cores 2.4 s).
constexpr double kSetupLimitSec = 40;
constexpr double kCloseLimitSec = 30;
// What the plugin may allocate per open comm, its share of device-wide arenas included (measured
// with 10,000 comms: sendrecv 3.3 KB a send comm, 3.7 KB a receive comm; rdma 21 KB a sender,
// 158 KB a receiver, 91 KB on shm, whose eager entries are smaller). The rdma comms hold a
// descriptor ring (sender) or its staging twin (receiver) each, and a receiver that took a
// message holds a bounce area for eager messages (at most 8 KiB an entry, the provider rules).
constexpr size_t kCommObjectsBytes = 8 * 1024;
size_t pluginBytesBound(bool receiver) {
  if (testProtocol() != "rdma") return kCommObjectsBytes;
  size_t bound = kCommObjectsBytes + protocol::rdma::kArenaSlotBytes + kCommObjectsBytes;
  return receiver ? bound + protocol::rdma::bounceBytes(8192) : bound;
}
// A gross leak (a buffer of its own per comm), not the provider's backlog.
constexpr double kResidentBytesPerCommLimit = 256 * 1024;

int scaleComms() {
  const char* value = getenv("NNF_SCALE_COMMS");
  return value != nullptr ? atoi(value) : 10000;
}

size_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

int openFds() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What one side measured, reported in the test log.
struct Figures {
  double setupSec = 0, dataSec = 0, closeSec = 0;
  double pluginBytesPerComm = 0;    // allocated by the plugin, still held (alloc_counter.h)
  double residentBytesPerComm = 0;  // the process's resident size grew by
  int fdsBefore = 0, fdsOpen = 0;
};

void report(Peer& peer, int comms, const Figures& f) {
  printf(
      "[%s] %d comms: set-up %.2f s, one message each %.2f s, close %.2f s, plugin %.0f "
      "bytes/comm, resident %.0f bytes/comm, fds %d -> %d\n",
      peer.role.c_str(), comms, f.setupSec, f.dataSec, f.closeSec, f.pluginBytesPerComm,
      f.residentBytesPerComm, f.fdsBefore, f.fdsOpen);
  fflush(stdout);
}

// The resident size means something only where the process holds nothing much beside the plugin:
// the EFA-rules stand-in keeps its own books per operation (reorder buffers, records) in this
// process too, and a sanitizer's redzones and shadow memory inflate every object.
bool residentBounded() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#else
  return testProvider() != "efa";
#endif
}

void checkBounds(const Peer& peer, const Figures& f) {
  EXPECT_LT(f.setupSec, kSetupLimitSec);
  EXPECT_LT(f.closeSec, kCloseLimitSec);
  EXPECT_LE(f.fdsOpen - f.fdsBefore, 8) << "file descriptors grow with the number of comms";
  if (alloc::kInterposed) {
    EXPECT_FALSE(alloc::pluginLiveOverflowed()) << "the counter could not remember every block";
    EXPECT_LE(f.pluginBytesPerComm, pluginBytesBound(peer.role == "receiver"))
        << "the plugin allocates more per open comm than its design says (docs/performance.md)";
  }
  if (residentBounded()) {
    EXPECT_LE(f.residentBytesPerComm, kResidentBytesPerCommLimit);
  }
}

// Starts counting what the plugin allocates from here on (its objects loaded by now).
void startCounting(Peer& peer) {
  if (!alloc::kInterposed) return;
  char error[256] = "";
  ASSERT_TRUE(alloc::snapshot(peer.net, error, sizeof(error))) << error;
  alloc::arm();
}

// Per comm: what the plugin holds of what it allocated since startCounting, and the growth of
// the resident size since `rssBefore`.
void measure(int comms, size_t rssBefore, Figures* f) {
  if (alloc::kInterposed) {
    alloc::disarm();
    f->pluginBytesPerComm = static_cast<double>(alloc::pluginLiveBytes()) / comms;
  }
  f->residentBytesPerComm =
      (static_cast<double>(residentBytes()) - static_cast<double>(rssBefore)) / comms;
}

// Calls `step(c, &comms[c])` round-robin over every comm not open yet, all pending at once as
// NCCL's proxy polls them, until every one is open (60 s at most).
template <typename Step>
void openAll(std::vector<void*>* comms, const char* what, Step step) {
  const int n = static_cast<int>(comms->size());
  int open = 0;
  Deadline deadline(60);
  while (open < n) {
    for (int c = 0; c < n; ++c) {
      if ((*comms)[c] != nullptr) continue;
      ASSERT_EQ(step(c, &(*comms)[c]), abi::kSuccess) << what << " " << c;
      open += (*comms)[c] != nullptr;
    }
    ASSERT_FALSE(deadline.expired()) << open << " of " << n << " " << what;
  }
}

TEST(Scale, TenThousandCommPairsOpenAtOnce) {
  const int n = scaleComms();
  auto sender = [&](Peer& peer) {
    HostBuffer buffer(size_t{kSlot} * n);
    for (int c = 0; c < n; ++c) fillPattern(buffer.data() + size_t{kSlot} * c, kSlot, c + 1);
    std::vector<Handle> handles(n);
    for (Handle& handle : handles) ASSERT_TRUE(peer.channel->recv(handle.bytes, sizeof(handle)));
    Figures f;
    f.fdsBefore = openFds();
    const size_t rssBefore = residentBytes();
    ASSERT_NO_FATAL_FAILURE(startCounting(peer));
    auto start = Clock::now();
    std::vector<void*> comms(n, nullptr);
    ASSERT_NO_FATAL_FAILURE(openAll(&comms, "connected", [&](int c, void** comm) {
      abi::NetDeviceHandleV8* devComm = nullptr;
      return peer.net->connect(peer.dev, handles[c].bytes, comm, &devComm);
    }));
    f.setupSec = secondsSince(start);
    ASSERT_TRUE(peer.channel->wait());  // the receiver has posted its receives
    start = Clock::now();
    // One registration serves every comm (regIsGlobal), as NCCL reuses its buffers.
    void* mhandle = nullptr;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comms[0], buffer.data(), buffer.size(), &mhandle));
    std::vector<void*> requests;
    for (int c = 0; c < n; ++c) {
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comms[c], buffer.data() + size_t{kSlot} * c, kSlot,
                                       kTag, mhandle, &request));
      requests.push_back(request);
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    f.dataSec = secondsSince(start);
    measure(n, rssBefore, &f);
    f.fdsOpen = openFds();
    ASSERT_TRUE(peer.channel->wait());  // the receiver checked every byte
    dereg(peer, comms[0], mhandle);
    start = Clock::now();
    for (void* comm : comms) closeSend(peer, comm);
    f.closeSec = secondsSince(start);
    report(peer, n, f);
    checkBounds(peer, f);
    peer.channel->finishBarrier(30);
  };
  auto receiver = [&](Peer& peer) {
    HostBuffer buffer(size_t{kSlot} * n);
    fillSentinel(buffer.data(), buffer.size());
    Figures f;
    f.fdsBefore = openFds();
    const size_t rssBefore = residentBytes();
    ASSERT_NO_FATAL_FAILURE(startCounting(peer));
    auto start = Clock::now();
    std::vector<Handle> handles(n);
    std::vector<void*> listens(n), comms(n, nullptr);
    for (int c = 0; c < n; ++c) ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handles[c], &listens[c]));
    for (Handle& handle : handles) ASSERT_TRUE(peer.channel->send(handle.bytes, sizeof(handle)));
    ASSERT_NO_FATAL_FAILURE(openAll(&comms, "accepted", [&](int c, void** comm) {
      abi::NetDeviceHandleV8* devComm = nullptr;
      return peer.net->accept(listens[c], comm, &devComm);
    }));
    f.setupSec = secondsSince(start);
    start = Clock::now();
    void* mhandle = nullptr;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comms[0], buffer.data(), buffer.size(), &mhandle));
    std::vector<void*> requests;
    for (int c = 0; c < n; ++c) {
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comms[c], buffer.data() + size_t{kSlot} * c, kSlot,
                                       kTag, mhandle, &request));
      requests.push_back(request);
    }
    ASSERT_TRUE(peer.channel->signal());
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    f.dataSec = secondsSince(start);
    int wrong = 0;
    for (int c = 0; c < n; ++c) {
      if (sizes[c] != kSlot || !verifyPattern(buffer.data() + size_t{kSlot} * c, kSlot, c + 1)) {
        if (++wrong <= 5) ADD_FAILURE() << "comm " << c << ": wrong data or size " << sizes[c];
      }
    }
    EXPECT_EQ(wrong, 0);
    measure(n, rssBefore, &f);
    f.fdsOpen = openFds();
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comms[0], mhandle);
    start = Clock::now();
    for (int c = 0; c < n; ++c) {
      closeRecv(peer, comms[c]);
      closeListen(peer, listens[c]);
    }
    f.closeSec = secondsSince(start);
    report(peer, n, f);
    checkBounds(peer, f);
    peer.channel->finishBarrier(30);
  };
  runTwoProcesses(sender, receiver, 240);
}

}  // namespace
}  // namespace nnf::test
