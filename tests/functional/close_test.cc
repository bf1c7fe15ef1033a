// Closing comms with requests in flight, as an abort does (ncclCommAbort, a watchdog timeout, an
// elastic restart): NCCL deregisters, closes and frees the buffers at once. Once a close returns
// the plugin must never touch those buffers again (a canary written after close stays intact; the
// buffers can be unmapped at once), close must not wait for nothing (idle close < 1 ms, 100 busy
// closes < 2 s), and messages that arrive for closed comms must be drained so that the device
// keeps connecting and moving data.
#include <rdma/fabric.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "platform/provider_rules.h"
#include "support/harness.h"
#include "support/known_failures.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kInFlight = 32;         // requests each way per comm pair
constexpr size_t kMessage = 1 << 20;  // 1 MiB each
constexpr uint8_t kCanary = 0xC5;
constexpr int kTag = 0x42;
constexpr int kMaxThreads = 4;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Rounds of the abort test: 100 on shm; tcp and efa (the EFA-rules provider over tcp) move every
// byte through the loopback socket on a shared CI machine (4 threads: ~4 s a round), so 5 there.
int abortRounds() {
  if (const char* rounds = getenv("NNF_CLOSE_ROUNDS")) return atoi(rounds);
  return 5;  // in CI; the 100-round runs of issue 12 by hand (docs/performance.md)
}

// Anonymous memory of its own mapping, so that it can be unmapped right after close.
struct Mapping {
  uint8_t* data = nullptr;
  size_t size = 0;
  explicit Mapping(size_t bytes) : size(bytes) {
    void* area = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data = area == MAP_FAILED ? nullptr : static_cast<uint8_t*>(area);
  }
  void unmap() {
    if (data != nullptr) munmap(data, size);
    data = nullptr;
  }
  ~Mapping() { unmap(); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

// connect and accept polled alternately (both processes do both at once).
void connectBoth(Peer& peer, Handle peerHandle, void* listen, void** sendComm, void** recvComm) {
  *sendComm = nullptr;
  *recvComm = nullptr;
  Deadline deadline(kOpTimeoutSec);
  while (*sendComm == nullptr || *recvComm == nullptr) {
    abi::NetDeviceHandleV8* devComm = nullptr;
    if (*sendComm == nullptr) {
      ASSERT_EQ(peer.net->connect(peer.dev, peerHandle.bytes, sendComm, &devComm), abi::kSuccess);
    }
    if (*recvComm == nullptr) {
      ASSERT_EQ(peer.net->accept(listen, recvComm, &devComm), abi::kSuccess);
    }
    ASSERT_FALSE(deadline.expired()) << "connection set-up did not finish";
    std::this_thread::yield();
  }
}

struct Mode {
  const char* name;
  int threads;
  bool unmap;  // unmap at once; else overwrite with the canary and check it later
  // A thread keeps the device progressing between rounds (NCCL's other proxy threads); without
  // one, nothing calls the plugin while the processes meet between rounds, as when an
  // application's ranks meet in a barrier after closing.
  bool progressThread = true;
  int rounds = 0;  // 0: abortRounds()
};

// One thread's round: a fresh comm pair each way, 32 x 1 MiB posted each way, a little progress,
// then deregister and close with everything still in flight.
struct Round {
  Mapping sends{kInFlight * kMessage};
  Mapping recvs{kInFlight * kMessage};
  double closeMs = 0;
};

void abortRound(Peer& peer, const Handle& peerHandle, void* listen, int round, Round* out) {
  ASSERT_NE(out->sends.data, nullptr);
  ASSERT_NE(out->recvs.data, nullptr);
  void *sendComm, *recvComm;
  ASSERT_NO_FATAL_FAILURE(connectBoth(peer, peerHandle, listen, &sendComm, &recvComm));
  void *sendMh, *recvMh;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, sendComm, out->sends.data, out->sends.size, &sendMh));
  ASSERT_NO_FATAL_FAILURE(regHost(peer, recvComm, out->recvs.data, out->recvs.size, &recvMh));
  memset(out->sends.data, round & 0xff, out->sends.size);
  std::vector<void*> requests;
  // Under rdma the peer closing first fails what waits for it (its close notice, or our writes
  // into its deregistered buffers): an error, never a hang or a write after close.
  const bool peerCloseFails = testProtocol() != "sendrecv";
  for (int i = 0; i < kInFlight; ++i) {
    void* request = nullptr;
    void* data = out->recvs.data + i * kMessage;
    int size = kMessage;
    int tag = kTag;
    ASSERT_EQ(peer.net->irecv(recvComm, 1, &data, &size, &tag, &recvMh, &request), abi::kSuccess);
    ASSERT_NE(request, nullptr);
    requests.push_back(request);
    request = nullptr;
    int result =
        peer.net->isend(sendComm, out->sends.data + i * kMessage, kMessage, kTag, sendMh, &request);
    if (peerCloseFails && result == abi::kRemoteError) continue;
    ASSERT_EQ(result, abi::kSuccess);
    ASSERT_NE(request, nullptr);
    requests.push_back(request);
  }
  // Some rounds close at once, others after some messages moved: every stage of a transfer.
  int polls = (round * 7) % 40;
  for (int p = 0; p < polls; ++p) {
    for (void*& request : requests) {
      if (request == nullptr) continue;
      int done = 0;
      int result = peer.net->test(request, &done, nullptr);
      if (peerCloseFails && result == abi::kRemoteError) {
        request = nullptr;
        continue;
      }
      ASSERT_EQ(result, abi::kSuccess);
      if (done) request = nullptr;
    }
  }
  // NCCL's order: deregister, then close, then free.
  auto start = Clock::now();
  EXPECT_EQ(peer.net->deregMr(sendComm, sendMh), abi::kSuccess);
  EXPECT_EQ(peer.net->deregMr(recvComm, recvMh), abi::kSuccess);
  if (round % 2 == 0) {
    EXPECT_EQ(peer.net->closeSend(sendComm), abi::kSuccess);
    EXPECT_EQ(peer.net->closeRecv(recvComm), abi::kSuccess);
  } else {
    EXPECT_EQ(peer.net->closeRecv(recvComm), abi::kSuccess);
    EXPECT_EQ(peer.net->closeSend(sendComm), abi::kSuccess);
  }
  out->closeMs = msSince(start);
}

class Abort : public ::testing::TestWithParam<Mode> {};

TEST_P(Abort, CloseWithRequestsInFlightThenFreeTheBuffers) {
  NNF_SKIP_KNOWN_FAILURE();
  const Mode mode = GetParam();
  const int rounds = mode.rounds > 0 ? mode.rounds : abortRounds();
  if (!platform::wildcardReceivesSafe(platform::familyOf(testProvider()), fi_version())) {
    // shm before libfabric 2.0: closed comms are not drained (provider_quirks_test), so the
    // 1 MiB sends to a closed comm stay with the provider and hold back that peer's queue.
    GTEST_SKIP() << "shm before libfabric 2.0: closed comms are not drained";
  }
  // Both processes run the same body: listen per thread, swap handles, then rounds.
  auto body = [&](Peer& peer) {
    std::vector<void*> listens(mode.threads);
    std::vector<Handle> mine(mode.threads), theirs(mode.threads);
    for (int t = 0; t < mode.threads; ++t) {
      ASSERT_NO_FATAL_FAILURE(listenOn(peer, &mine[t], &listens[t]));
    }
    ASSERT_TRUE(peer.channel->send(mine.data(), sizeof(Handle) * mode.threads));
    ASSERT_TRUE(peer.channel->recv(theirs.data(), sizeof(Handle) * mode.threads));
    std::vector<std::unique_ptr<Round>> previous(mode.threads);
    double maxCloseMs = 0, totalCloseMs = 0;
    for (int round = 0; round < rounds; ++round) {
      std::vector<std::unique_ptr<Round>> current(mode.threads);
      std::vector<std::thread> threads;
      for (int t = 0; t < mode.threads; ++t) {
        current[t] = std::make_unique<Round>();
        threads.emplace_back([&, t] {
          SCOPED_TRACE("round " + std::to_string(round) + " thread " + std::to_string(t));
          abortRound(peer, theirs[t], listens[t], round, current[t].get());
          if (mode.unmap) {
            current[t]->sends.unmap();
            current[t]->recvs.unmap();
          } else {
            memset(current[t]->sends.data, kCanary, current[t]->sends.size);
            memset(current[t]->recvs.data, kCanary, current[t]->recvs.size);
          }
        });
      }
      {
        // The device keeps progressing until both sides closed everything (the peer's sends
        // to our closed comms are drained meanwhile).
        std::unique_ptr<Progressor> progressor;
        if (mode.progressThread) progressor = std::make_unique<Progressor>(peer);
        for (std::thread& thread : threads) thread.join();
        if (::testing::Test::HasFailure()) return;
        ASSERT_TRUE(peer.channel->signal());
        ASSERT_TRUE(peer.channel->wait());
      }
      for (int t = 0; t < mode.threads; ++t) {
        maxCloseMs = std::max(maxCloseMs, current[t]->closeMs);
        totalCloseMs += current[t]->closeMs;
        if (previous[t] != nullptr && !mode.unmap) {
          ASSERT_TRUE(verifySentinel(previous[t]->sends.data, previous[t]->sends.size, kCanary))
              << "a send buffer changed after close (round " << round - 1 << ")";
          ASSERT_TRUE(verifySentinel(previous[t]->recvs.data, previous[t]->recvs.size, kCanary))
              << "a receive buffer was written after close (round " << round - 1 << ")";
        }
        previous[t] = std::move(current[t]);
      }
    }
    // The device still works, and the last round's canaries held after all of it.
    HostBuffer out(kMessage), in(kMessage);
    void *sendComm, *recvComm;
    ASSERT_NO_FATAL_FAILURE(connectBoth(peer, theirs[0], listens[0], &sendComm, &recvComm));
    void *sendMh, *recvMh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, sendComm, out.data(), kMessage, &sendMh));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, recvComm, in.data(), kMessage, &recvMh));
    fillPattern(out.data(), kMessage, 99);
    void *recvRequest, *sendRequest;
    ASSERT_NO_FATAL_FAILURE(
        postRecv(peer, recvComm, in.data(), kMessage, kTag, recvMh, &recvRequest));
    ASSERT_NO_FATAL_FAILURE(
        postSend(peer, sendComm, out.data(), kMessage, kTag, sendMh, &sendRequest));
    int size = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, sendRequest, nullptr));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, recvRequest, &size));
    EXPECT_EQ(size, static_cast<int>(kMessage));
    EXPECT_TRUE(verifyPattern(in.data(), kMessage, 99));
    for (int t = 0; t < mode.threads && !mode.unmap; ++t) {
      if (previous[t] == nullptr) continue;
      EXPECT_TRUE(verifySentinel(previous[t]->sends.data, previous[t]->sends.size, kCanary));
      EXPECT_TRUE(verifySentinel(previous[t]->recvs.data, previous[t]->recvs.size, kCanary));
    }
    dereg(peer, sendComm, sendMh);
    dereg(peer, recvComm, recvMh);
    peer.channel->finishBarrier(60);
    closeSend(peer, sendComm);
    closeRecv(peer, recvComm);
    for (void* listen : listens) closeListen(peer, listen);
    // A close that gave up on its operations says so: that must not happen with a live peer.
    for (const std::string& text : peer.warningTexts()) {
      EXPECT_EQ(text.find("unsafe to free"), std::string::npos) << text;
    }
    fprintf(stderr, "[%s] %d rounds x %d threads: close of a busy pair max %.1f ms, mean %.2f ms\n",
            peer.role.c_str(), rounds, mode.threads, maxCloseMs,
            totalCloseMs / (rounds * mode.threads));
  };
  runTwoProcesses(body, body, 600);
}

INSTANTIATE_TEST_SUITE_P(Close, Abort,
                         ::testing::Values(Mode{"OneThreadCanary", 1, false},
                                           Mode{"OneThreadUnmap", 1, true},
                                           Mode{"FourThreadsCanary", kMaxThreads, false},
                                           Mode{"FourThreadsUnmap", kMaxThreads, true},
                                           Mode{"FourThreadsUnmapNoProgressThread", kMaxThreads,
                                                true, false, 10}),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param.name);
                         });

// 50 comm pairs each way (100 comms per process) with requests in flight, closed by both sides at
// once: under 2 s in all. Each closed idle comm: under 1 ms.
TEST(Close, HundredBusyCommsCloseUnderTwoSecondsAndIdleOnesUnderOneMillisecond) {
  constexpr int kPairs = 50;
  constexpr int kPerComm = 8;
  constexpr size_t kSize = 256 << 10;
  auto body = [&](Peer& peer) {
    void* listen;
    Handle mine, theirs;
    ASSERT_NO_FATAL_FAILURE(listenOn(peer, &mine, &listen));
    ASSERT_TRUE(peer.channel->send(&mine, sizeof(mine)));
    ASSERT_TRUE(peer.channel->recv(&theirs, sizeof(theirs)));
    HostBuffer out(kPerComm * kSize), in(kPerComm * kSize);
    std::vector<void*> sends(kPairs), recvs(kPairs), sendMhs(kPairs), recvMhs(kPairs);
    for (int c = 0; c < kPairs; ++c) {
      ASSERT_NO_FATAL_FAILURE(connectBoth(peer, theirs, listen, &sends[c], &recvs[c]));
      ASSERT_NO_FATAL_FAILURE(regHost(peer, sends[c], out.data(), out.size(), &sendMhs[c]));
      ASSERT_NO_FATAL_FAILURE(regHost(peer, recvs[c], in.data(), in.size(), &recvMhs[c]));
    }
    // Idle closes first: a pair that moved one message and has nothing in flight.
    std::vector<double> idleMs;
    for (int c = 0; c < 10; ++c) {
      void *sendComm, *recvComm, *sendMh, *recvMh, *sendRequest, *recvRequest;
      ASSERT_NO_FATAL_FAILURE(connectBoth(peer, theirs, listen, &sendComm, &recvComm));
      ASSERT_NO_FATAL_FAILURE(regHost(peer, sendComm, out.data(), 4096, &sendMh));
      ASSERT_NO_FATAL_FAILURE(regHost(peer, recvComm, in.data(), 4096, &recvMh));
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, recvComm, in.data(), 4096, kTag, recvMh, &recvRequest));
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, sendComm, out.data(), 4096, kTag, sendMh, &sendRequest));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, sendRequest, nullptr));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, recvRequest, nullptr));
      dereg(peer, sendComm, sendMh);
      dereg(peer, recvComm, recvMh);
      ASSERT_TRUE(peer.channel->signal());  // both sides done with this pair before closing
      ASSERT_TRUE(peer.channel->wait());
      auto start = Clock::now();
      closeSend(peer, sendComm);
      idleMs.push_back(msSince(start));
      start = Clock::now();
      closeRecv(peer, recvComm);
      idleMs.push_back(msSince(start));
    }
    std::sort(idleMs.begin(), idleMs.end());
    double median = idleMs[idleMs.size() / 2];
    EXPECT_LT(median, 1.0) << "closing an idle comm should return at once";

    for (int c = 0; c < kPairs; ++c) {
      for (int i = 0; i < kPerComm; ++i) {
        void* request;
        ASSERT_NO_FATAL_FAILURE(
            postRecv(peer, recvs[c], in.data() + i * kSize, kSize, kTag, recvMhs[c], &request));
        ASSERT_NO_FATAL_FAILURE(
            postSend(peer, sends[c], out.data() + i * kSize, kSize, kTag, sendMhs[c], &request));
      }
    }
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_TRUE(peer.channel->wait());
    auto progressor = std::make_unique<Progressor>(peer);
    auto start = Clock::now();
    for (int c = 0; c < kPairs; ++c) {
      dereg(peer, sends[c], sendMhs[c]);
      dereg(peer, recvs[c], recvMhs[c]);
      // Half the pairs close their receive comm first.
      if (c % 2 == 0) {
        closeSend(peer, sends[c]);
        closeRecv(peer, recvs[c]);
      } else {
        closeRecv(peer, recvs[c]);
        closeSend(peer, sends[c]);
      }
    }
    double busyMs = msSince(start);
    EXPECT_LT(busyMs, 2000) << "closing 100 busy comms";
    fprintf(stderr,
            "[%s] idle close median %.3f ms max %.3f ms; 100 busy comms closed in %.0f ms\n",
            peer.role.c_str(), median, idleMs.back(), busyMs);
    peer.channel->finishBarrier(60);
    progressor.reset();
    closeListen(peer, listen);
  };
  runTwoProcesses(body, body, 300);
}

// Messages sent to comms the peer has closed are consumed and discarded: afterwards new comms
// connect and move verified data (shm would otherwise keep each one in one of its 1,024 receive
// slots; tcp would keep the sender waiting). NNF_DRAIN_MESSAGES sets the count (10,000 in CI).
// A close that gives up (NCCL_FABRIC_CLOSE_TIMEOUT_MS: the peer is alive but takes nothing; here
// it is stopped, SIGSTOP, as a hung or descheduled process: a running one's keeper thread would
// take the messages) fails, its sends still held by the provider: success would tell NCCL that it
// may free the buffers the provider still reads. The comm must outlive those sends: when the peer
// finally takes the messages, their completions come back to it, and the process goes on
// working. A comm freed at close would be used after free here (a crash, or ASan's report).
TEST(Close, AGivenUpCloseKeepsItsCommUntilTheProviderReturnsItsSends) {
  if (onSoftEfa() && testProtocol() == "rdma") {
    // SRD completes an RDMA write without the target's CPU: nothing stays held by a receiver
    // that stops progressing (as on a real EFA NIC).
    GTEST_SKIP() << "writes on the software EFA device complete without the receiver";
  }
  constexpr int kSends = 16;
  constexpr size_t kSize = 4 << 20;  // 64 MiB in all: more than tcp's socket buffers hold
  ScopedEnv env;
  env.set("NCCL_FABRIC_CLOSE_TIMEOUT_MS", "300");
  // rdma writes only into buffers the receiver described: its receives come first (then it
  // stops progressing), and the sender's writes start before it closes.
  const bool rdma = testProtocol() == "rdma";
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    // The buffers stay allocated to the end, as the close WARN asks.
    HostBuffer out(kSends * kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    if (rdma) {  // the receives are described
      ASSERT_TRUE(peer.channel->wait(60));
    }
    pid_t receiverPid = 0;
    ASSERT_TRUE(peer.channel->recvValue(&receiverPid));
    ASSERT_TRUE(waitUntilStopped(receiverPid)) << "the receiver did not stop";
    std::vector<void*> requests(kSends);
    for (int i = 0; i < kSends; ++i) {
      fillPattern(out.data() + i * kSize, kSize, 300 + i);
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, comm, out.data() + i * kSize, kSize, kTag, mh, &requests[i]));
    }
    // Progress a while: under rdma the descriptors are taken and every write starts. The first
    // write or two may complete into the socket buffers (tcp's loopback holds a few MiB); the
    // other sends stay with the provider, and the close must find some still held.
    int held = kSends;
    std::vector<bool> completed(kSends, false);
    for (auto start = Clock::now(); rdma && msSince(start) < 200;) {
      for (int i = 0; i < kSends; ++i) {
        if (completed[i]) continue;
        int done = 0;
        ASSERT_EQ(peer.net->test(requests[i], &done, nullptr), abi::kSuccess);
        if (done != 0) {
          completed[i] = true;
          --held;
        }
      }
    }
    ASSERT_GE(held, kSends / 2) << "sends completed though the receiver does not progress";
    peer.resetWarnings();
    auto start = Clock::now();
    EXPECT_EQ(peer.net->deregMr(comm, mh), abi::kSuccess);
    EXPECT_EQ(peer.net->closeSend(comm), abi::kRemoteError)
        << "a close returned success while the provider still holds its sends";
    EXPECT_GE(msSince(start), 250) << "the close did not wait for its sends";
    int given = 0;
    for (const std::string& text : peer.warningTexts())
      given += text.find("unsafe to free") != std::string::npos;
    EXPECT_EQ(given, 1) << "the receiver took nothing: the close gives up with one WARN";
    ASSERT_EQ(kill(receiverPid, SIGCONT), 0);
    ASSERT_TRUE(peer.channel->signal());  // closed
    {
      // The held sends move (tcp needs this side's progress too) and complete while the
      // device progresses; then a new comm moves data.
      Progressor progressor(peer);
      ASSERT_TRUE(peer.channel->wait());  // the receiver has every message
    }
    void* fresh;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &fresh));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, fresh, out.data(), kSize, &mh));
    fillPattern(out.data(), kSize, 400);
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, fresh, out.data(), kSize, kTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    dereg(peer, fresh, mh);
    peer.channel->finishBarrier(60);
    closeSend(peer, fresh);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer in(kSends * kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mh));
    std::vector<void*> requests(kSends);
    auto postAll = [&] {
      for (int i = 0; i < kSends; ++i) {
        ASSERT_NO_FATAL_FAILURE(
            postRecv(peer, comm, in.data() + i * kSize, kSize, kTag, mh, &requests[i]));
      }
    };
    if (rdma) {
      ASSERT_NO_FATAL_FAILURE(postAll());
      // Our descriptor writes leave; then no progress until the sender gave up its close.
      for (auto start = Clock::now(); msSince(start) < 100;) {
        int done = 0;
        ASSERT_EQ(peer.net->test(requests[0], &done, nullptr), abi::kSuccess);
      }
      ASSERT_TRUE(peer.channel->signal());
    }
    // No progress, not even the device's keeper: the sender's close finds its sends held. The
    // sender continues this process once its close gave up.
    ASSERT_TRUE(peer.channel->sendValue(getpid()));
    raise(SIGSTOP);
    ASSERT_TRUE(peer.channel->wait(60));
    if (!rdma) {
      ASSERT_NO_FATAL_FAILURE(postAll());
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    for (int i = 0; i < kSends; ++i) {
      EXPECT_EQ(sizes[i], static_cast<int>(kSize));
      EXPECT_TRUE(verifyPattern(in.data() + i * kSize, kSize, 300 + i)) << "message " << i;
    }
    ASSERT_TRUE(peer.channel->signal());
    void *freshListen, *fresh;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &freshListen, &fresh));
    void* freshMh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, fresh, in.data(), kSize, &freshMh));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, fresh, in.data(), kSize, kTag, freshMh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    EXPECT_TRUE(verifyPattern(in.data(), kSize, 400));
    peer.channel->finishBarrier(60);
    dereg(peer, fresh, freshMh);
    dereg(peer, comm, mh);
    closeRecv(peer, fresh);
    closeRecv(peer, comm);
    closeListen(peer, freshListen);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

TEST(Close, MessagesForClosedCommsAreDrained) {
  NNF_SKIP_KNOWN_FAILURE();
  constexpr int kComms = 100;
  constexpr int kWindow = 16;
  constexpr size_t kLarge = 1 << 20;
  const int messages = getenv("NNF_DRAIN_MESSAGES") ? atoi(getenv("NNF_DRAIN_MESSAGES")) : 10000;
  if (testProtocol() == "rdma") {
    GTEST_SKIP() << "rdma sends nothing a receiver did not ask for: nothing to drain "
                    "(Close.RdmaSendsToAClosedReceiverFail covers its case)";
  }
  if (!platform::wildcardReceivesSafe(platform::familyOf(testProvider()), fi_version())) {
    GTEST_SKIP() << "shm before libfabric 2.0: closed comms are not drained (it mismatches "
                    "messages after a wildcard receive; provider_quirks_test)";
  }
  auto sender = [&](Peer& peer) {
    std::vector<void*> comms(kComms);
    Handle handle;
    ASSERT_TRUE(peer.channel->recv(handle.bytes, sizeof(handle.bytes)));
    for (void*& comm : comms) ASSERT_NO_FATAL_FAILURE(connectTo(peer, &handle, &comm));
    ASSERT_TRUE(peer.channel->wait());  // the receiver closed every one of them
    HostBuffer out(kLarge);
    fillPattern(out.data(), kLarge, 7);
    std::vector<void*> mhs(kComms);
    for (int c = 0; c < kComms; ++c) {
      ASSERT_NO_FATAL_FAILURE(regHost(peer, comms[c], out.data(), kLarge, &mhs[c]));
    }
    auto start = Clock::now();
    std::vector<void*> window;
    std::vector<int> sizes;
    for (int m = 0; m < messages; ++m) {
      int c = m % kComms;
      // Mostly small messages; every 50th one large (truncated by a small drain buffer).
      int size = m % 50 == 0 ? static_cast<int>(kLarge) : 64;
      void* request;
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, comms[c], out.data(), size, kTag + m % 3, mhs[c], &request));
      window.push_back(request);
      if (window.size() == kWindow) {
        ASSERT_NO_FATAL_FAILURE(waitAll(peer, window, &sizes)) << "message " << m;
        window.clear();
      }
    }
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, window, &sizes));
    fprintf(stderr, "[sender] %d messages to closed comms completed in %.0f ms\n", messages,
            msSince(start));
    for (int c = 0; c < kComms; ++c) {
      dereg(peer, comms[c], mhs[c]);
      closeSend(peer, comms[c]);
    }
    ASSERT_TRUE(peer.channel->signal());
    // New comms on the same devices still connect and move data.
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), kLarge, &mh));
    for (int m = 0; m < 8; ++m) {
      void* request;
      fillPattern(out.data(), kLarge, 100 + m);
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, out.data(), kLarge, kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    }
    dereg(peer, comm, mh);
    peer.channel->finishBarrier(60);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void* listen;
    Handle handle;
    ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, &listen));
    ASSERT_TRUE(peer.channel->send(handle.bytes, sizeof(handle.bytes)));
    for (int c = 0; c < kComms; ++c) {
      void* comm;
      ASSERT_NO_FATAL_FAILURE(acceptOn(peer, listen, &comm));
      closeRecv(peer, comm);
    }
    closeListen(peer, listen);
    ASSERT_TRUE(peer.channel->signal());
    // Keep the device progressing while the late messages arrive.
    auto progressor = std::make_unique<Progressor>(peer);
    bool sent = peer.channel->wait(600);
    progressor.reset();
    ASSERT_TRUE(sent);
    ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, &listen));
    void* comm;
    ASSERT_TRUE(peer.channel->send(handle.bytes, sizeof(handle.bytes)));
    ASSERT_NO_FATAL_FAILURE(acceptOn(peer, listen, &comm));
    HostBuffer in(kLarge);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), kLarge, &mh));
    for (int m = 0; m < 8; ++m) {
      void* request;
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), kLarge, kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
      EXPECT_EQ(size, static_cast<int>(kLarge));
      EXPECT_TRUE(verifyPattern(in.data(), kLarge, 100 + m)) << "message " << m;
    }
    dereg(peer, comm, mh);
    peer.channel->finishBarrier(60);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 900);
}

// rdma: a send waits for its receive's descriptor; when the receiver closes instead, its close
// notice fails the send at once (not at a timeout, not never).
TEST(Close, RdmaSendsToAClosedReceiverFail) {
  if (testProtocol() != "rdma") {
    GTEST_SKIP() << "sendrecv delivers into the closed comm's drain instead (MessagesForClosed"
                    "CommsAreDrained)";
  }
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    ASSERT_TRUE(peer.channel->wait());  // the receiver closed its end
    HostBuffer out(4096);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    void* request = nullptr;
    int result = peer.net->isend(comm, out.data(), 4096, kTag, mh, &request);
    if (result == abi::kSuccess) {
      ASSERT_NE(request, nullptr);
      auto start = Clock::now();
      int done = 0;
      while (result == abi::kSuccess && done == 0 && msSince(start) < 10000) {
        result = peer.net->test(request, &done, nullptr);
      }
      EXPECT_EQ(done, 0) << "a send completed though no receiver asked for it";
    }
    EXPECT_EQ(result, abi::kRemoteError) << "the send should fail once the receiver is closed";
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    closeRecv(peer, comm);
    closeListen(peer, listen);
    ASSERT_TRUE(peer.channel->signal());
  };
  runTwoProcesses(sender, receiver, 60);
}

// rdma: a receiver that closes while the sender's writes are still with the sender's provider is
// alive: the sender's close waits for those writes. Its close notice used to count as the death
// of the peer, so the close returned at once; the provider then read send buffers NCCL had freed
// (tcp: EFAULT mid-stream, which broke the connection and lost the receiver's close ack).
TEST(Close, RdmaSendCloseWaitsForItsWritesAfterTheReceiverClosed) {
  if (testProtocol() != "rdma") {
    GTEST_SKIP() << "sendrecv has no close notice: the receiver's close fails nothing";
  }
  constexpr int kSends = 16;
  constexpr size_t kSize = 4 << 20;  // far more than the idle receiver's socket buffers hold
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    Mapping out(kSends * kSize);
    ASSERT_NE(out.data, nullptr);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data, out.size, &mh));
    ASSERT_TRUE(peer.channel->wait());  // its receives are posted
    std::vector<void*> requests(kSends, nullptr);
    for (int i = 0; i < kSends; ++i) {
      ASSERT_EQ(peer.net->isend(comm, out.data + i * kSize, kSize, kTag, mh, &requests[i]),
                abi::kSuccess);
      ASSERT_NE(requests[i], nullptr);
    }
    // A few polls read the descriptors and start the writes; most stay with the provider, as
    // the receiver does not progress.
    for (int p = 0; p < 20; ++p) {
      for (void*& request : requests) {
        if (request == nullptr) continue;
        int done = 0;
        ASSERT_EQ(peer.net->test(request, &done, nullptr), abi::kSuccess);
        if (done) request = nullptr;
      }
    }
    ASSERT_TRUE(peer.channel->signal());
    // The receiver closes now; its notice waits in our provider until the close below reads it.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    peer.resetWarnings();
    dereg(peer, comm, mh);
    closeSend(peer, comm);
    out.unmap();  // as NCCL frees its buffers after close
    for (const std::string& text : peer.infoTexts()) {
      EXPECT_EQ(text.find("after its peer died"), std::string::npos) << text;
    }
    ASSERT_TRUE(peer.channel->wait());  // the receiver's close ended
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    Mapping in(kSends * kSize);
    ASSERT_NE(in.data, nullptr);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data, in.size, &mh));
    std::vector<void*> requests(kSends, nullptr);
    for (int i = 0; i < kSends; ++i) {
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data + i * kSize, static_cast<int>(kSize),
                                       kTag, mh, &requests[i]));
    }
    // The descriptor writes leave with a few polls.
    for (int p = 0; p < 20; ++p) {
      int done = 0;
      ASSERT_EQ(peer.net->test(requests[kSends - 1], &done, nullptr), abi::kSuccess);
      ASSERT_EQ(done, 0);
    }
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_TRUE(peer.channel->wait());  // the sender's writes started
    dereg(peer, comm, mh);
    auto start = Clock::now();
    closeRecv(peer, comm);
    double ms = msSince(start);
    in.unmap();
    closeListen(peer, listen);
    // The sender's acknowledgement follows its last write: well within the close bound (10 s).
    EXPECT_LT(ms, 5000.0) << "the sender's close acknowledgement never came";
    for (const std::string& text : peer.warningTexts()) {
      EXPECT_EQ(text.find("unsafe to free"), std::string::npos) << text;
    }
    ASSERT_TRUE(peer.channel->signal());
  };
  runTwoProcesses(sender, receiver, 120);
}

// A write that completed at the sender may still be on its way to the receiver (tcp completes a
// write once sent), on another rail than the leader where the sender's close answer travels.
// The EFA-rules provider holds rail 1's writes back 400 ms (NNF_EFA_RULES_HOLD_NIC) while their
// completions come at once: the receiver's close must not return before they landed, or NCCL
// frees a buffer a write then lands in. The answer says how many writes each rail carried.
TEST(Close, ARecvCloseWaitsForWritesStillOnTheirWayOnAnotherRail) {
  if (testProtocol() != "rdma" || testRails() < 2) {
    GTEST_SKIP() << "needs the rdma protocol over two rails (efa+rdma+2rails)";
  }
  constexpr int kSize = 8 << 20;  // striped: half on each rail
  ScopedEnv env;
  env.set("NNF_EFA_RULES_HOLD_NIC", "1:400");
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer out(kSize);
    fillPattern(out.data(), kSize, 7);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    ASSERT_TRUE(peer.channel->wait());  // the receive is posted
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, out.data(), kSize, kTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));  // rail 1's share: still held
    ASSERT_TRUE(peer.channel->signal());
    {
      // Answers the receiver's close and lets the held writes go when they are due.
      Progressor progressor(peer);
      ASSERT_TRUE(peer.channel->wait());  // the receiver closed
    }
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer in(kSize);
    fillSentinel(in.data(), kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mh));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), kSize, kTag, mh, &request));
    ASSERT_TRUE(peer.channel->signal());
    {
      // The leader's share must flow (tcp completes a write once the socket took it).
      Progressor progressor(peer);
      ASSERT_TRUE(peer.channel->wait());  // the send completed at the sender
    }
    auto start = Clock::now();
    closeRecv(peer, comm);  // as an abort does, with the receive not done
    double ms = msSince(start);
    // Whatever the sender wrote is here by now: nothing lands after the close.
    EXPECT_TRUE(verifyPattern(in.data(), kSize, 7))
        << "the close returned after " << ms << " ms, before the other rail's writes landed";
    dereg(peer, comm, mh);
    closeListen(peer, listen);
    ASSERT_TRUE(peer.channel->signal());
  };
  runTwoProcesses(sender, receiver, 120);
}

// The sender's close answer goes only once its own writes have completed, so that it counts
// them all: here the sender closes right after starting a striped message, its completions not
// yet read, and the EFA-rules provider holds rail 1's share back 400 ms. An answer sent at once
// would count none of that message's writes, and the receiver's close would return before the
// held share landed.
TEST(Close, TheSendersCloseAnswerCountsTheWritesItClosedWith) {
  if (testProtocol() != "rdma" || testRails() < 2) {
    GTEST_SKIP() << "needs the rdma protocol over two rails (efa+rdma+2rails)";
  }
  constexpr int kSmall = 64;
  constexpr int kSize = 8 << 20;  // striped: half on each rail
  ScopedEnv env;
  env.set("NNF_EFA_RULES_HOLD_NIC", "1:400");
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer out(kSize);
    fillPattern(out.data(), kSize, 9);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    ASSERT_TRUE(peer.channel->wait());  // the grouped receive is posted
    void* request;
    // Both buffers are described by one write: once the small send is done, the large one
    // finds its descriptor and writes at once.
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, out.data(), kSmall, kTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_EQ(peer.net->isend(comm, out.data(), kSize, kTag + 1, mh, &request), abi::kSuccess);
    ASSERT_NE(request, nullptr);
    closeSend(peer, comm);  // as an abort does: not tested, its writes' completions unread
    dereg(peer, comm, mh);
    Progressor progressor(peer);  // lets the held share go when it is due
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_TRUE(peer.channel->wait());  // the receiver closed
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer small(kSmall);
    HostBuffer in(kSize);
    fillSentinel(in.data(), kSize);
    void* mhs[2];
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, small.data(), small.size(), &mhs[0]));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mhs[1]));
    void* data[2] = {small.data(), in.data()};
    int sizes[2] = {kSmall, kSize};
    int tags[2] = {kTag, kTag + 1};
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecvGroup(peer, comm, 2, data, sizes, tags, mhs, &request));
    ASSERT_TRUE(peer.channel->signal());
    {
      Progressor progressor(peer);        // writes the descriptors, reads what lands and the answer
      ASSERT_TRUE(peer.channel->wait());  // the sender closed
    }
    auto start = Clock::now();
    closeRecv(peer, comm);  // the receive not tested: as an abort does
    double ms = msSince(start);
    EXPECT_TRUE(verifyPattern(in.data(), kSize, 9))
        << "the close returned after " << ms << " ms, before the held rail's writes landed";
    dereg(peer, comm, mhs[0]);
    dereg(peer, comm, mhs[1]);
    closeListen(peer, listen);
    ASSERT_TRUE(peer.channel->signal());
  };
  runTwoProcesses(sender, receiver, 120);
}

// The sender's close answer (kClosedAck) says how many writes it made on each rail, and a
// receiver's close with a receive still posted waits until that many have landed on each. The
// EFA-rules provider holds writes with immediate data back 400 ms (NNF_EFA_RULES_HOLD_NIC) while
// their completions come at once, so the answer, a control message that is not held, overtakes
// them: the close must wait for exactly the writes counted. A count too low on a held rail lets
// the close return before the message landed; a count too high anywhere (the descriptor path,
// the eager path and the sender's answer to the grant run first) keeps the close waiting for a
// write that never comes, until it gives up and fails. On one rail and on two: inline and whole
// messages with every NIC held, striped ones with one of the two held.
struct HeldCase {
  const char* name;
  const char* heldNics;  // NNF_EFA_RULES_HOLD_NIC's list
  int size;              // the message whose writes are held
  int rails;             // the least rails it needs
  bool eager;            // the sender sends small messages eagerly
};

void PrintTo(const HeldCase& held, std::ostream* out) {
  *out << held.name;  // test names stay the same from build to build
}

class CloseCounts : public ::testing::TestWithParam<HeldCase> {};

TEST_P(CloseCounts, ARecvCloseWaitsForEveryWriteTheSenderCounted) {
  const HeldCase& held = GetParam();
  if (testProtocol() != "rdma" || testProvider() != "efa" || onSoftEfa()) {
    GTEST_SKIP() << "needs the rdma protocol on the EFA-rules provider (efa+rdma[+2rails])";
  }
  if (testRails() < held.rails) GTEST_SKIP() << "needs " << held.rails << " rails";
  constexpr int kSmall = 64, kSmallRounds = 4, kDescribed = 16 << 10;
  ScopedEnv env;
  env.set("NNF_EFA_RULES_HOLD_NIC", std::string(held.heldNics) + ":400");
  // A message small enough to go eagerly would, while its descriptor is still on its way.
  if (!held.eager) env.set("NNF_TEST_ENV_SENDER", "NCCL_FABRIC_EAGER_MAX=0");
  const int size = held.size;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer out(static_cast<size_t>(size));
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    {
      // Lets the held writes go when they are due (completions come at once, and an inline write
      // has none: nothing else reads the sender's queues meanwhile), and answers the receiver's
      // close.
      Progressor progressor(peer);
      // Small messages first: by descriptor, then (the receiver granted its bounce entries at
      // the second receive and said its small receives go undescribed) eagerly.
      for (int round = 0; round < kSmallRounds; ++round) {
        ASSERT_TRUE(peer.channel->wait());  // its receive is posted
        fillPattern(out.data(), kSmall, 90 + round);
        void* request;
        ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, out.data(), kSmall, kTag, mh, &request));
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
        ASSERT_TRUE(peer.channel->wait());  // received: the buffer may be filled again
      }
      ASSERT_TRUE(peer.channel->wait());  // the receive of the held message is posted
      fillPattern(out.data(), static_cast<size_t>(size), 7);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, out.data(), size, kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));  // its writes: still held
      ASSERT_TRUE(peer.channel->signal());
      ASSERT_TRUE(peer.channel->wait());  // the receiver closed
    }
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    // Larger than a bounce entry: described, so that even a small message is written into it
    // (an undescribed one would come eagerly, and a closed comm drops it).
    const int room = std::max(size, kDescribed);
    HostBuffer in(static_cast<size_t>(room));
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mh));
    void* request;
    for (int round = 0; round < kSmallRounds; ++round) {
      fillSentinel(in.data(), kSmall);
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), kSmall, kTag, mh, &request));
      ASSERT_TRUE(peer.channel->signal());
      int got = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &got));
      ASSERT_EQ(got, kSmall);
      ASSERT_TRUE(verifyPattern(in.data(), kSmall, 90 + round)) << "small message " << round;
      ASSERT_TRUE(peer.channel->signal());
    }
    fillSentinel(in.data(), in.size());
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), room, kTag, mh, &request));
    ASSERT_TRUE(peer.channel->signal());
    {
      Progressor progressor(peer);        // what is not held must flow
      ASSERT_TRUE(peer.channel->wait());  // the send completed at the sender
    }
    int before = peer.warnings();
    auto start = Clock::now();
    closeRecv(peer, comm);  // with the receive not done, as an abort does: it expects success
    double ms = msSince(start);
    EXPECT_TRUE(verifyPattern(in.data(), static_cast<size_t>(size), 7))
        << "the close returned after " << ms << " ms, before the held writes (NICs "
        << held.heldNics << ") landed";
    EXPECT_EQ(peer.warnings(), before) << "the close waited for writes that never came";
    dereg(peer, comm, mh);
    closeListen(peer, listen);
    ASSERT_TRUE(peer.channel->signal());
  };
  runTwoProcesses(sender, receiver, 120);
}

INSTANTIATE_TEST_SUITE_P(
    Close, CloseCounts,
    // 24 bytes go inline by their descriptor (no completion: counted when posted), from a sender
    // that sends nothing eagerly; 100 KiB whole on one rail.
    ::testing::Values(HeldCase{"InlineWithEveryRailHeld", "0,1", 24, 1, false},
                      HeldCase{"WholeWithEveryRailHeld", "0,1", 100 << 10, 1, true},
                      HeldCase{"StripedWithTheLeaderHeld", "0", (8 << 20) + 1, 2, true},
                      HeldCase{"StripedWithRail1Held", "1", (8 << 20) + 1, 2, true}),
    [](const ::testing::TestParamInfo<HeldCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace nnf::test
