// Many comms open at once between two processes, as NCCL's proxy opens every channel to every
// peer (and all-to-all / PXN one per remote rank): all listens, connects and accepts polled
// together, one verified message on each comm, then every comm closed. Bounds from issue 14:
// set-up under 10 s, close under 5 s, no file descriptor per comm, at most 16 KiB of memory per
// open comm. NNF_SCALE_COMMS sets the number of pairs (10,000 by default).
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTag = 7;
constexpr int kSlot = 64;  // bytes per comm in the data buffers
constexpr double kSetupLimitSec = 10;
constexpr double kCloseLimitSec = 5;
constexpr double kBytesPerCommLimit = 16 * 1024;
// A set-up this slow means the two processes were starved of CPU (here it takes 0.15-0.25 s).
// shm then queues the unanswered set-up messages in the sender, and the resident size per comm
// measured grew to 17-22 KB (twice in one CI run, both shm suites, while tcp and efa beside them
// stayed within bounds). Starvation shows in the data phase too: shm refuses most of the 10,000
// inline writes at once (8,000 fell back to posted writes in a debug count) and holds those in
// the sender, so that CI measured 17.7 KB after a 0.33 s set-up, where the same binary measures
// 10-12 KB alone. A run over the bound is therefore measured once more, starved or not; two in
// a row fail.
constexpr double kStarvedSetupSec = 0.4;

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
  double bytesPerComm = 0;
  int fdsBefore = 0, fdsOpen = 0;
};

void report(Peer& peer, int comms, const Figures& f) {
  printf(
      "[%s] %d comms: set-up %.2f s, one message each %.2f s, close %.2f s, %.0f bytes/comm, "
      "fds %d -> %d\n",
      peer.role.c_str(), comms, f.setupSec, f.dataSec, f.closeSec, f.bytesPerComm, f.fdsBefore,
      f.fdsOpen);
  fflush(stdout);
}

// Whether the memory bound applies: the EFA-rules stand-in keeps its own books per operation
// (reorder buffers, records) in this process too, where the resident size says little about the
// plugin; a sanitizer's redzones and shadow memory inflate every object.
bool memoryBounded() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#else
  return testProvider() != "efa";
#endif
}

// The memory figure goes to the test's process (a file per role, named after that process),
// which judges it: see kStarvedSetupSec.
std::string figuresPath(long testPid, const std::string& role) {
  return "/tmp/nnf-scale-" + std::to_string(testPid) + "-" + role;
}

void checkBounds(const Peer& peer, long testPid, const Figures& f) {
  EXPECT_LT(f.setupSec, kSetupLimitSec);
  EXPECT_LT(f.closeSec, kCloseLimitSec);
  EXPECT_LE(f.fdsOpen - f.fdsBefore, 8) << "file descriptors grow with the number of comms";
  std::ofstream(figuresPath(testPid, peer.role)) << f.bytesPerComm << " " << f.setupSec << "\n";
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
  const long testPid = static_cast<long>(getpid());
  auto sender = [&](Peer& peer) {
    HostBuffer buffer(size_t{kSlot} * n);
    for (int c = 0; c < n; ++c) fillPattern(buffer.data() + size_t{kSlot} * c, kSlot, c + 1);
    std::vector<Handle> handles(n);
    for (Handle& handle : handles) ASSERT_TRUE(peer.channel->recv(handle.bytes, sizeof(handle)));
    Figures f;
    f.fdsBefore = openFds();
    const size_t rssBefore = residentBytes();
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
    f.bytesPerComm = (static_cast<double>(residentBytes()) - static_cast<double>(rssBefore)) / n;
    f.fdsOpen = openFds();
    ASSERT_TRUE(peer.channel->wait());  // the receiver checked every byte
    dereg(peer, comms[0], mhandle);
    start = Clock::now();
    for (void* comm : comms) closeSend(peer, comm);
    f.closeSec = secondsSince(start);
    report(peer, n, f);
    checkBounds(peer, testPid, f);
    peer.channel->finishBarrier(30);
  };
  auto receiver = [&](Peer& peer) {
    HostBuffer buffer(size_t{kSlot} * n);
    fillSentinel(buffer.data(), buffer.size());
    Figures f;
    f.fdsBefore = openFds();
    const size_t rssBefore = residentBytes();
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
    f.bytesPerComm = (static_cast<double>(residentBytes()) - static_cast<double>(rssBefore)) / n;
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
    checkBounds(peer, testPid, f);
    peer.channel->finishBarrier(30);
  };
  for (int attempt = 1;; ++attempt) {
    for (const char* role : {"sender", "receiver"}) unlink(figuresPath(testPid, role).c_str());
    runTwoProcesses(sender, receiver, 240);
    if (HasFailure() || !memoryBounded()) return;
    bool starved = false, over = false;
    std::string overText;
    for (const char* role : {"sender", "receiver"}) {
      double bytesPerComm = 0, setupSec = 0;
      std::ifstream in(figuresPath(testPid, role));
      ASSERT_TRUE(in >> bytesPerComm >> setupSec) << "no figures from the " << role;
      unlink(figuresPath(testPid, role).c_str());
      starved = starved || setupSec > kStarvedSetupSec;
      if (bytesPerComm > kBytesPerCommLimit) {
        over = true;
        overText += std::string(role) + " " + std::to_string(bytesPerComm) + " bytes/comm ";
      }
    }
    if (!over) return;
    if (attempt == 1) {
      printf("%s%s: measuring again\n", starved ? "set-up starved and " : "", overText.c_str());
      continue;
    }
    ADD_FAILURE() << overText << "over the bound of " << kBytesPerCommLimit
                  << " per comm in a second run" << (starved ? " (set-up starved)" : "");
    return;
  }
}

}  // namespace
}  // namespace nnf::test
