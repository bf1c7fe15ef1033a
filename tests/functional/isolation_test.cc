// A fault stays inside its comm. Two comm pairs connect the same two processes (the same device,
// the same provider connection underneath: rxm keeps one per peer, tcp one socket); comm B
// streams verified messages from a thread of its own on each side while comm A suffers one
// fault: a send larger than its receive, a receiver that closes with sends in flight, late
// messages for a comm already closed (drained by the plugin), a receive cancelled by close.
// Every message of B must land whole, and A's fault must be reported on A alone.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rdma/fabric.h>

#include "platform/provider_rules.h"
#include "support/harness.h"
#include "support/known_failures.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kStreamTag = 1;
constexpr int kFaultTag = 2;
constexpr int kWindow = 8;
constexpr int kMessages = 400;
constexpr int kSizes[] = {64, 4096, 64 << 10, 1 << 20};
constexpr int kLargest = 1 << 20;
constexpr int kLate = 32;  // 1 MiB messages in flight on the faulty comm

int sizeOf(int message) {
  return kSizes[message % (sizeof(kSizes) / sizeof(kSizes[0]))];
}

// Streams kMessages on `comm` (kWindow in flight), every one verified at the receiver, and
// counts what completed into `completed`. Halfway it stops posting (its window still in flight)
// until `faultDone`: the fault strikes while the comm is busy, and half its traffic comes after.
void stream(Peer& peer, void* comm, bool sender, std::atomic<int>* completed,
            const std::atomic<bool>* faultDone) {
  HostBuffer buffer(size_t{kLargest} * kWindow);
  void* mh = nullptr;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
  std::vector<void*> requests(kWindow, nullptr);
  for (int m = 0; m < kMessages + kWindow; ++m) {
    int slot = m % kWindow;
    if (requests[slot] != nullptr) {
      int done = m - kWindow;
      int size = -1;
      Outcome outcome = pollRequest(peer, requests[slot], &size, 60);
      ASSERT_TRUE(outcome.done && outcome.result == abi::kSuccess)
          << "message " << done << " on the healthy comm: result " << outcome.result
          << (outcome.timedOut ? " (timed out)" : "");
      requests[slot] = nullptr;
      uint8_t* data = buffer.data() + size_t{kLargest} * slot;
      if (!sender) {
        ASSERT_EQ(size, sizeOf(done)) << "message " << done;
        ASSERT_TRUE(verifyPattern(data, size, 1000 + done)) << "message " << done;
      }
      completed->fetch_add(1);
    }
    if (m >= kMessages) continue;
    if (m == kMessages / 2) {
      Deadline deadline(120);
      while (!faultDone->load() && !deadline.expired()) std::this_thread::yield();
      ASSERT_TRUE(faultDone->load()) << "the fault on the other comm did not end";
    }
    uint8_t* data = buffer.data() + size_t{kLargest} * slot;
    if (sender) {
      fillPattern(data, sizeOf(m), 1000 + m);
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, comm, data, sizeOf(m), kStreamTag, mh, &requests[slot]));
    } else {
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, data, kLargest, kStreamTag, mh, &requests[slot]));
    }
  }
  dereg(peer, comm, mh);
}

enum class Fault {
  kTruncatingSend,
  kPeerClosesWithSendsInFlight,
  kLateMessages,
  kCancelledReceive
};

struct Case {
  const char* name;
  Fault fault;
};

// Waits for a request of the faulty comm: it may succeed or fail, never hang.
abi::Result settle(Peer& peer, void* request) {
  Outcome outcome = pollRequest(peer, request, nullptr, 60);
  EXPECT_FALSE(outcome.timedOut) << "a request of the faulty comm neither completed nor failed";
  return outcome.result;
}

// The sender's side of comm A's fault.
void faultAsSender(Peer& peer, void* comm, Fault fault) {
  HostBuffer out(size_t{kLargest} * kLate);
  fillPattern(out.data(), out.size(), 7);
  void* mh = nullptr;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
  switch (fault) {
    case Fault::kTruncatingSend: {
      ASSERT_TRUE(peer.channel->wait());  // the 4 KiB receive is posted
      void* request = nullptr;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, out.data(), 5120, kFaultTag, mh, &request));
      settle(peer, request);  // rdma refuses it here; sendrecv's send may complete
      break;
    }
    case Fault::kPeerClosesWithSendsInFlight:
    case Fault::kLateMessages: {
      if (fault == Fault::kLateMessages) {
        ASSERT_TRUE(peer.channel->wait());  // it closed
      }
      std::vector<void*> requests;
      for (int i = 0; i < kLate; ++i) {
        void* request = nullptr;
        int result = peer.net->isend(comm, out.data() + size_t{kLargest} * i, kLargest, kFaultTag,
                                     mh, &request);
        if (result != abi::kSuccess) break;  // rdma: the receiver closed
        if (request != nullptr) requests.push_back(request);
      }
      if (fault == Fault::kPeerClosesWithSendsInFlight) {
        ASSERT_TRUE(peer.channel->signal());
      }
      for (void* request : requests) settle(peer, request);
      break;
    }
    case Fault::kCancelledReceive:
      break;
  }
  ASSERT_TRUE(peer.channel->signal());
  ASSERT_TRUE(peer.channel->wait());  // the receiver is done with comm A
  dereg(peer, comm, mh);
  closeSend(peer, comm);
}

// The receiver's side of comm A's fault.
void faultAsReceiver(Peer& peer, void* comm, Fault fault) {
  HostBuffer in(size_t{kLargest} * kLate);
  void* mh = nullptr;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mh));
  switch (fault) {
    case Fault::kTruncatingSend: {
      void* request = nullptr;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), 4096, kFaultTag, mh, &request));
      ASSERT_TRUE(peer.channel->signal());
      EXPECT_NE(settle(peer, request), abi::kSuccess) << "a truncated receive reported success";
      ASSERT_TRUE(peer.channel->wait());
      dereg(peer, comm, mh);
      closeRecv(peer, comm);
      break;
    }
    case Fault::kPeerClosesWithSendsInFlight: {
      std::vector<void*> requests(8);
      for (int i = 0; i < 8; ++i) {
        ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data() + size_t{kLargest} * i, kLargest,
                                         kFaultTag, mh, &requests[i]));
      }
      ASSERT_TRUE(peer.channel->wait());  // its sends are posted
      dereg(peer, comm, mh);
      closeRecv(peer, comm);  // with receives and sends in flight
      ASSERT_TRUE(peer.channel->wait());
      break;
    }
    case Fault::kLateMessages:
      dereg(peer, comm, mh);
      closeRecv(peer, comm);
      ASSERT_TRUE(peer.channel->signal());
      ASSERT_TRUE(peer.channel->wait(120));  // its late messages were drained or refused
      break;
    case Fault::kCancelledReceive: {
      void* request = nullptr;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), kLargest, kFaultTag, mh, &request));
      dereg(peer, comm, mh);
      closeRecv(peer, comm);
      ASSERT_TRUE(peer.channel->wait());
      break;
    }
  }
  ASSERT_TRUE(peer.channel->signal());
}

class Isolation : public ::testing::TestWithParam<Case> {};

TEST_P(Isolation, AFaultOnOneCommLeavesTheOtherMoving) {
  NNF_SKIP_KNOWN_FAILURE();
  const Fault fault = GetParam().fault;
  bool lateMessages = fault == Fault::kPeerClosesWithSendsInFlight || fault == Fault::kLateMessages;
  if (lateMessages && testProtocol() != "rdma" &&
      !platform::wildcardReceivesSafe(platform::familyOf(testProvider()), fi_version())) {
    // Messages for a closed comm stay unmatched with the provider there, and shm moves a pair's
    // large messages through one queue: they hold up the healthy comm's (the abort tests skip
    // for the same reason). rdma sends nothing a receiver did not ask for.
    GTEST_SKIP() << "shm before libfabric 2.0 under sendrecv: closed comms are not drained "
                    "(a wildcard receive makes it mismatch later messages; provider_quirks_test)";
  }
  auto run = [fault](Peer& peer, bool sender) {
    void *faulty = nullptr, *healthy = nullptr, *listen = nullptr;
    if (sender) {
      ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &faulty));
      ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &healthy));
    } else {
      ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &faulty));
      closeListen(peer, listen);
      ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &healthy));
      closeListen(peer, listen);
    }
    std::atomic<int> completed{0};
    std::atomic<bool> faultDone{false};
    std::thread streamer([&] { stream(peer, healthy, sender, &completed, &faultDone); });
    // The fault strikes while the healthy comm is busy.
    Deadline started(60);
    while (completed.load() < kWindow && !started.expired() && !::testing::Test::HasFailure()) {
      std::this_thread::yield();
    }
    if (sender) {
      faultAsSender(peer, faulty, fault);
    } else {
      faultAsReceiver(peer, faulty, fault);
    }
    faultDone = true;
    streamer.join();
    EXPECT_EQ(completed.load(), kMessages) << "the healthy comm lost messages";
    peer.channel->finishBarrier(60);
    if (sender) {
      closeSend(peer, healthy);
    } else {
      closeRecv(peer, healthy);
    }
  };
  runTwoProcesses([&](Peer& peer) { run(peer, true); }, [&](Peer& peer) { run(peer, false); }, 300);
}

INSTANTIATE_TEST_SUITE_P(
    Isolation, Isolation,
    ::testing::Values(Case{"TruncatingSend", Fault::kTruncatingSend},
                      Case{"PeerClosesWithSendsInFlight", Fault::kPeerClosesWithSendsInFlight},
                      Case{"LateMessagesForAClosedComm", Fault::kLateMessages},
                      Case{"ReceiveCancelledByClose", Fault::kCancelledReceive}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace nnf::test
