// One device of several NICs ("rails"): the EFA-rules provider presents two NICs
// (NNF_TEST_PROVIDER=efa+rdma+2rails, tests/support/test_env.h) that NCCL_FABRIC_RAILS groups
// into one device. The device must report the rails' summed speed, and its data must travel over
// every rail: large messages striped across them, small ones spread round-robin, grouped
// receives too. The provider counts the bytes each NIC's domain carried (NNF_EFA_RULES_STATS),
// and reports any descriptor or remote key used on the wrong rail (the suite fails on it).
// With one rail (NNF_TEST_RAILS unset) there is nothing to spread: every test skips. A rail that
// fails and what the plugin does about it: failover_test.cc.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rails.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x3C;
constexpr size_t kTail = 4096;  // bytes past each message checked for stray writes
// What the plugin reports with the NICs ungrouped: one device per NIC, each one rail. Each NIC
// is named a group of its own (an empty value groups by topology, and on softefa the p5 slice
// puts both NICs beside GPU 0, one device).
std::vector<int> ungroupedSpeeds() {
  ScopedEnv env;
  std::string groups = efaRulesDomainName(0);
  for (int nic = 1; nic < testRails(); ++nic) groups += ";" + efaRulesDomainName(nic);
  env.set("NCCL_FABRIC_RAILS", groups.c_str());  // kept by the test support
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  runOneProcess([&](Peer& peer) {
    std::vector<int> speeds;
    for (int dev = 0; dev < peer.ndev; ++dev) {
      abi::PropertiesV8 props{};
      ASSERT_EQ(peer.net->getProperties(dev, &props), abi::kSuccess);
      speeds.push_back(props.speed);
    }
    int count = static_cast<int>(speeds.size());
    ASSERT_EQ(write(fds[1], &count, sizeof(count)), static_cast<ssize_t>(sizeof(count)));
    ssize_t bytes = static_cast<ssize_t>(speeds.size() * sizeof(int));
    ASSERT_EQ(write(fds[1], speeds.data(), bytes), bytes);
  });
  close(fds[1]);
  int count = 0;
  std::vector<int> speeds;
  if (read(fds[0], &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count)) && count > 0) {
    speeds.resize(count);
    ssize_t bytes = static_cast<ssize_t>(count * sizeof(int));
    EXPECT_EQ(read(fds[0], speeds.data(), bytes), bytes);
  }
  close(fds[0]);
  return speeds;
}

TEST(Multirail, DeviceSpeedIsTheSumOfItsRails) {
  REQUIRE_RAILS();
  std::vector<int> single = ungroupedSpeeds();
  ASSERT_EQ(static_cast<int>(single.size()), testRails())
      << "ungrouped, each NIC should be a device of its own";
  int sum = 0;
  for (int speed : single) {
    EXPECT_GT(speed, 0);
    sum += speed;
  }
  runOneProcess([&](Peer& peer) {
    EXPECT_EQ(peer.ndev, 1) << "NCCL_FABRIC_RAILS groups every NIC into one device";
    EXPECT_EQ(peer.props.speed, sum)
        << "one rail reports " << single.front() << " Mbps; " << testRails() << " rails carry data";
  });
}

TEST(Multirail, LargeMessagesAreStripedOverEveryRail) {
  REQUIRE_RAILS();
  // Odd sizes beside the round ones, chosen so that a share computed a little wrong shows: a
  // stripe boundary must not lose or repeat the tail. 8 MiB + 1 halves to exactly 4 MiB when
  // rounded down, which leaves a third share of one byte for a rail that does not exist; 12 MiB
  // + 4097 and 32 MiB - 1 give shares that are no multiple of 4 KiB; 256 KiB is the stripe size
  // itself (NCCL_FABRIC_STRIPE_MIN), 256 KiB + 1 the least message with an odd last share.
  static const std::vector<int> kSizes = {8 << 20,   (8 << 20) + 1,  (8 << 20) + 3,
                                          64 << 20,  (32 << 20) - 1, (12 << 20) + 4097,
                                          256 << 10, (256 << 10) + 1};
  const size_t largest = static_cast<size_t>(*std::max_element(kSizes.begin(), kSizes.end()));
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(largest);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (size_t i = 0; i < kSizes.size(); ++i) {
      SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(kSizes[i]) + " B");
      fillPattern(buffer.data(), kSizes[i], i);
      std::map<std::string, uint64_t> before = carriedByRail();
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), kSizes[i], kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
      // The send is done once its writes are: the counts are final for this message.
      EXPECT_TRUE(everyRailCarried(before, carriedByRail(), kSizes[i]));
    }
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) { receiveEachInTurn(peer, kSizes, kTag, kTail); };
  runTwoProcesses(sender, receiver, 180);
}

// A stripe size lowered to 4 KiB (and no eager path, which would take these sizes whole on the
// leader): messages whose halves round up to the next 4 KiB leave a short last share (4097: 4 KiB
// and 1 byte), or none at all (4096 goes whole, on the next rail in turn), and a share computed
// from the halves rounded down would cut 8193 into three for two rails. Every byte lands once, in
// its place, and nothing past the message.
TEST(Multirail, SharesOfSizesThatDoNotDivideByTheRailsOrByTheAlignment) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  ScopedEnv env;
  env.set("NCCL_FABRIC_STRIPE_MIN", "4096");
  env.set("NCCL_FABRIC_EAGER_MAX", "0");
  static const std::vector<int> kSizes = {
      4096, 4097, 8192, 8193, 12289, (64 << 10) + 1, (1 << 20) + 1, (1 << 20) - 1, 3 * 4096 + 2};
  auto sender = [&](Peer& peer) { sendEachInTurn(peer, kSizes, kTag); };
  auto receiver = [&](Peer& peer) { receiveEachInTurn(peer, kSizes, kTag, kTail); };
  runTwoProcesses(sender, receiver, 180);
}

// Receives sized as NCCL sizes them (a step buffer, larger than the messages): described, so each
// message goes by descriptor on the next rail. (Receives no larger than an eager entry are not
// described: EagerMessagesAreSpreadOverEveryRail below.)
TEST(Multirail, SmallMessagesAreSpreadOverEveryRail) {
  REQUIRE_RAILS();
  constexpr int kMessages = 1000;
  constexpr int kSize = 4096;
  constexpr int kRecvSize = 64 << 10;
  constexpr int kWindow = abi::kMaxRequests;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{kWindow} * kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    std::map<std::string, uint64_t> before = carriedByRail();
    for (int first = 0; first < kMessages; first += kWindow) {
      std::vector<void*> requests;
      for (int m = first; m < std::min(first + kWindow, kMessages); ++m) {
        uint8_t* slot = buffer.data() + size_t{kSize} * (m - first);
        fillPattern(slot, kSize, m);
        void* request;
        ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, slot, kSize, kTag, mh, &request));
        requests.push_back(request);
      }
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    }
    EXPECT_TRUE(everyRailCarried(before, carriedByRail(), uint64_t{kMessages} * kSize));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size_t{kWindow} * kRecvSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int first = 0; first < kMessages; first += kWindow) {
      fillSentinel(buffer.data(), buffer.size());
      std::vector<void*> requests;
      for (int m = first; m < std::min(first + kWindow, kMessages); ++m) {
        void* request;
        ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm,
                                         buffer.data() + size_t{kRecvSize} * (m - first), kRecvSize,
                                         kTag, mh, &request));
        requests.push_back(request);
      }
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
      for (int m = first; m < std::min(first + kWindow, kMessages); ++m) {
        EXPECT_EQ(sizes[m - first], kSize) << "message " << m;
        EXPECT_TRUE(verifyPattern(buffer.data() + size_t{kRecvSize} * (m - first), kSize, m))
            << "message " << m;
      }
    }
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 180);
}

// 4 KiB sends that complete while their receiver makes no call at all: they can only have gone
// eagerly, into the receiver's bounce entries (registered on every rail). Rounds of a window
// each: the sender's window completes, then the receiver takes the messages (and returns the
// entries by credit writes). Every rail carries its share of the eager messages.
TEST(Multirail, EagerMessagesAreSpreadOverEveryRail) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kRounds = 8;
  constexpr int kWindow = 32;
  constexpr int kSize = 4096;
  constexpr int kWarmTag = kTag + 1;
  constexpr int kWarmRecv = 64 << 10;  // larger than an entry: described
  auto warmUps = [] { return 2 * testRails() + 1; };
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{kWindow} * kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    // Messages by descriptor first (into receives larger than an entry), the rails in turn:
    // eager messages go only on rails a write of ours reached. The last receive takes the bounce
    // area, grants it and says that small receives go undescribed.
    for (int warm = 0; warm < warmUps(); ++warm) {
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), 8, kWarmTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    }
    std::map<std::string, uint64_t> before = carriedByRail();
    for (int round = 0; round < kRounds; ++round) {
      ASSERT_TRUE(peer.channel->wait(60));  // the receiver makes no call until we signal
      std::vector<void*> window;
      for (int i = 0; i < kWindow; ++i) {
        uint8_t* data = buffer.data() + size_t{kSize} * i;
        fillPattern(data, kSize, 1000 * round + i);
        void* request;
        ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, kSize, kTag, mh, &request));
        window.push_back(request);
      }
      // Bounded by what the plugin does (a quiet receiver's window goes eagerly within its
      // quiet time, 1 ms), not by this machine's load: 60 s.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      size_t left = window.size();
      while (left > 0 && std::chrono::steady_clock::now() < deadline) {
        for (void*& request : window) {
          if (request == nullptr) continue;
          int done = 0, size = 0;
          ASSERT_EQ(peer.net->test(request, &done, &size), abi::kSuccess);
          if (done != 0) {
            request = nullptr;
            --left;
          }
        }
      }
      ASSERT_EQ(left, 0u) << "round " << round << ": 4 KiB sends did not complete while the "
                          << "receiver made no call (they did not go eagerly)";
      ASSERT_TRUE(peer.channel->signal());
    }
    ASSERT_TRUE(peer.channel->wait(60));  // the receiver took the last window
    EXPECT_TRUE(everyRailCarried(before, carriedByRail(), uint64_t{kRounds} * kWindow * kSize))
        << "the eager messages";
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(std::max(size_t{kWindow} * kSize + kTail, size_t{kWarmRecv}));
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int warm = 0; warm < warmUps(); ++warm) {
      void* request;
      int size = warm + 1 < warmUps() ? kWarmRecv : 8;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), size, kWarmTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    }
    for (int round = 0; round < kRounds; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      fillSentinel(buffer.data(), buffer.size());
      ASSERT_TRUE(peer.channel->signal());
      ASSERT_TRUE(peer.channel->wait(120));  // no call into the plugin meanwhile
      std::vector<void*> window(kWindow, nullptr);
      for (int i = 0; i < kWindow; ++i) {
        ASSERT_NO_FATAL_FAILURE(
            postRecv(peer, comm, buffer.data() + size_t{kSize} * i, kSize, kTag, mh, &window[i]));
      }
      for (int i = 0; i < kWindow; ++i) {
        int size = -1;
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, window[i], &size));
        EXPECT_EQ(size, kSize);
        EXPECT_TRUE(verifyPattern(buffer.data() + size_t{kSize} * i, kSize, 1000 * round + i))
            << "message " << i;
      }
      EXPECT_TRUE(verifySentinel(buffer.data() + size_t{kWindow} * kSize, kTail));
    }
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 180);
}

// Eight buffers per grouped receive, sizes from 64 KiB to past 1 MiB (odd ones among them).
constexpr int kGroup = 8;
constexpr int kGroupSlot = (1 << 20) + (64 << 10);
int groupSize(int round, int j) {
  return j % 2 == 0 ? (1 << 20) + 4097 * j + round : (64 << 10) * (j + 1) + 3;
}
uint64_t groupMessage(int round, int j) {
  return 1000 * round + j;
}

TEST(Multirail, GroupedReceivesGetTheirDataOverEveryRail) {
  REQUIRE_RAILS();
  constexpr int kRounds = 4;
  auto sender = [&](Peer& peer) {
    ASSERT_GE(peer.props.maxRecvs, kGroup);
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{kGroupSlot} * kGroup);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    std::map<std::string, uint64_t> before = carriedByRail();
    uint64_t payload = 0;
    for (int round = 0; round < kRounds; ++round) {
      std::vector<void*> requests;
      // Reverse order: the receiver must match by tag, whichever rail a part came over.
      for (int j = kGroup - 1; j >= 0; --j) {
        uint8_t* slot = buffer.data() + size_t{kGroupSlot} * j;
        fillPattern(slot, groupSize(round, j), groupMessage(round, j));
        void* request;
        ASSERT_NO_FATAL_FAILURE(
            postSend(peer, comm, slot, groupSize(round, j), kTag + j, mh, &request));
        requests.push_back(request);
        payload += groupSize(round, j);
      }
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    }
    EXPECT_TRUE(everyRailCarried(before, carriedByRail(), payload));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size_t{kGroupSlot} * kGroup);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int round = 0; round < kRounds; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      fillSentinel(buffer.data(), buffer.size());
      std::vector<void*> data(kGroup), mhandles(kGroup, mh);
      std::vector<int> sizes(kGroup, kGroupSlot), tags(kGroup);
      for (int j = 0; j < kGroup; ++j) {
        data[j] = buffer.data() + size_t{kGroupSlot} * j;
        tags[j] = kTag + j;
      }
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecvGroup(peer, comm, kGroup, data.data(), sizes.data(),
                                            tags.data(), mhandles.data(), &request));
      std::vector<int> got(kGroup, -1);
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, got.data()));
      for (int j = 0; j < kGroup; ++j) {
        const uint8_t* slot = buffer.data() + size_t{kGroupSlot} * j;
        SCOPED_TRACE("buffer " + std::to_string(j));
        EXPECT_EQ(got[j], groupSize(round, j));
        EXPECT_TRUE(verifyPattern(slot, groupSize(round, j), groupMessage(round, j)));
        EXPECT_TRUE(verifySentinel(slot + groupSize(round, j), kGroupSlot - groupSize(round, j)));
      }
    }
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 180);
}

// A NIC whose writes all fail with an error that says nothing of the path (NNF_EFA_RULES_FAIL_NIC:
// FI_EIO): every message striped over it fails at the sender, and the device names that NIC in
// one WARN however many fail, while nothing names the healthy leader. (The software device's
// failing NIC reports a broken path, "unreachable remote", which the device leaves out of later
// messages: ARailWhosePathBreaksIsLeftOutOfLaterMessages.)
TEST(Multirail, AFailingRailIsNamedOnceAndItsSendsFail) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  if (onSoftEfa()) GTEST_SKIP() << "the software device's failures are broken paths";
  constexpr int kMessages = 3;
  constexpr int kSize = 8 << 20;  // striped: a share on each rail
  ScopedEnv env;
  env.set("NNF_EFA_RULES_FAIL_NIC", "1");
  const std::string broken = "rail 1 (NIC " + efaRulesDomainName(1) + ")";
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int i = 0; i < kMessages; ++i) {
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), kSize, kTag, mh, &request));
      Outcome outcome = pollRequest(peer, request, nullptr);
      EXPECT_FALSE(outcome.timedOut) << "message " << i;
      EXPECT_NE(outcome.result, abi::kSuccess) << "message " << i << " went over a broken rail";
    }
    int named = 0, leader = 0;
    for (const std::string& text : peer.warningTexts()) {
      named += text.find(broken) != std::string::npos;
      leader += text.find("rail 0 (NIC") != std::string::npos;
    }
    EXPECT_EQ(named, 1) << "the broken rail is named once, not per failure";
    EXPECT_EQ(leader, 0) << "the healthy leader was blamed";
    ASSERT_TRUE(peer.channel->signal());  // the receiver may close
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size_t{kSize} * kMessages);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    std::vector<void*> requests(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, buffer.data() + size_t{kSize} * i, kSize, kTag, mh, &requests[i]));
    }
    // The leader's shares land, the broken rail's never do: no receive may complete. The device
    // is progressed meanwhile, as NCCL's proxy does: on the real efa provider the descriptions
    // of these receives wait in the plugin until the first handshake on each rail, which only
    // progress completes (the stand-in takes them at once).
    Deadline deadline(60);
    bool signalled = false;
    while (!signalled && !deadline.expired()) {
      for (void* request : requests) {
        int done = 0;
        peer.net->test(request, &done, nullptr);
      }
      signalled = peer.channel->signalled();
    }
    ASSERT_TRUE(signalled) << "the sender did not finish within 60 s";
    for (int i = 0; i < kMessages; ++i) {
      int done = 0;
      EXPECT_NE(peer.net->test(requests[i], &done, nullptr) == abi::kSuccess && done, true)
          << "receive " << i << " completed without its broken rail's share";
    }
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

}  // namespace
}  // namespace nnf::test
