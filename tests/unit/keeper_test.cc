// The device's keeper over the in-memory fabric: what a device hands its provider leaves even when
// the application never calls that device again. On tcp (a send queued behind one the socket has
// not taken) and efa (a packet the target had no buffer for, RNR, sent again) a post or an inject
// leaves only at the endpoint's next progress; an injected send is done at once, so NCCL may never
// test that device again. The fabric models that (FakeFabricOptions::departWithSourceProgress), and
// the keepers run as their threads would (FakePlugin::turnKeepers), on both protocols.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/request.h"
#include "support/fake_rdma_run.h"
#include "support/patterns.h"

namespace nnf::test {
namespace {

struct KeeperCase {
  FakeFamily family;
  bool rdma;
  std::string name;
};

std::vector<KeeperCase> keeperCases() {
  std::vector<KeeperCase> cases;
  for (const FakeFamily& family : fakeFamilies()) {
    cases.push_back({family, true, std::string(family.name) + "_rdma"});
  }
  for (const FakeFamily& family : fakeFamilies()) {
    if (family.rails == 1) cases.push_back({family, false, std::string(family.name) + "_sendrecv"});
  }
  return cases;
}

void PrintTo(const KeeperCase& keeperCase, std::ostream* out) {
  *out << keeperCase.name;
}

class KeeperOverFakeFabric : public ::testing::TestWithParam<KeeperCase> {};

// Small sends one at a time, each the sender's last for a while: NCCL tests the send until it is
// done (with the receive, which its peer's proxy tests meanwhile), then calls only the receiver.
// Every message must arrive whole: the sender's device is progressed by its keeper alone.
TEST_P(KeeperOverFakeFabric, TheLastSmallSendArrivesThoughItsSenderIsNeverCalledAgain) {
  const KeeperCase& mode = GetParam();
  WarnCounter warnings;
  FakePlugin::Options options = fakeOptions(mode.family, 9);
  options.rdma = mode.rdma;
  options.fabric.holdOneIn = 0;
  options.fabric.departWithSourceProgress = true;
  FakePlugin fake(options);
  FakePlugin::Pair pair;
  ASSERT_TRUE(fake.connect(&pair));
  constexpr size_t kBytes = 4096;
  std::vector<uint8_t> out(kBytes), in(kBytes);
  void* sendHandle = fake.registerMemory(pair.send, out.data(), out.size());
  void* recvHandle = fake.registerMemory(pair.recv, in.data(), in.size());
  core::Plugin& plugin = fake.plugin();

  constexpr int kMessages = 24;
  int arrivedOnlyAfterTheSenderStopped = 0;
  for (int message = 0; message < kMessages; ++message) {
    // Sizes an inject takes on every family (its limit: 32 bytes on efa), and some larger.
    const size_t size = message % 3 == 2 ? 200 + 40 * static_cast<size_t>(message) : 8 + message;
    fillPattern(out.data(), size, static_cast<uint64_t>(message) + 1);
    memset(in.data(), 0, in.size());
    core::Request* recv;
    core::Request* send;
    ASSERT_NO_FATAL_FAILURE(fake.postOneEach(pair, message, in.data(), kBytes, recvHandle,
                                             out.data(), size, sendHandle, &recv, &send));
    int sendDone = 0;
    int recvDone = 0;
    size_t received = 0;
    for (int step = 0; step < 100000 && sendDone == 0; ++step) {
      ASSERT_EQ(plugin.test(send, &sendDone, nullptr, nullptr), abi::kSuccess);
      if (recvDone == 0) {
        ASSERT_EQ(plugin.test(recv, &recvDone, &received, nullptr), abi::kSuccess);
      }
      fake.turnKeepers();
    }
    ASSERT_EQ(sendDone, 1) << "message " << message << ": the send never ended";
    // From now on the sender's device is never called; the keepers run as their threads would.
    if (recvDone == 0) ++arrivedOnlyAfterTheSenderStopped;
    for (int step = 0; step < 400000 && recvDone == 0; ++step) {
      ASSERT_EQ(plugin.test(recv, &recvDone, &received, nullptr), abi::kSuccess);
      fake.turnKeepers();
    }
    ASSERT_EQ(recvDone, 1) << "message " << message << " (" << size
                           << " bytes) never arrived: what the sender handed its provider "
                              "stayed there once nobody called the sender";
    EXPECT_EQ(received, size);
    EXPECT_TRUE(verifyPattern(in.data(), size, static_cast<uint64_t>(message) + 1))
        << "message " << message;
  }
  // The case this test is for happened: messages left their sender after its last call. Not on
  // a comm of several rails: its data never goes inline there (a failed inject would be lost
  // unseen, docs/failover.md), so a send ends only once its write has landed.
  EXPECT_GT(fake.fabric().stats().departedLate, 0u);
  if (mode.family.rails > 1 && mode.rdma) {
    EXPECT_EQ(fake.fabric().stats().injects, 0u) << "data went inline on a comm of several rails";
  } else {
    EXPECT_GT(arrivedOnlyAfterTheSenderStopped, 0);
    EXPECT_GT(fake.fabric().stats().injects, 0u);
  }
  EXPECT_EQ(fake.closeSend(pair.send), abi::kSuccess);
  EXPECT_EQ(fake.closeRecv(pair.recv), abi::kSuccess);
  fake.deregisterMemory(pair.send, sendHandle);
  fake.deregisterMemory(pair.recv, recvHandle);
  EXPECT_TRUE(fake.nothingHeld());
  EXPECT_EQ(warnings.others(), 0);
}

// With nothing left to look after but a rail that is down, the keeper sleeps until the rail's
// probe is due (NCCL_FABRIC_RAIL_PROBE_MS, here 100 ms) instead of turning every millisecond for
// as long as the rail stays down (hours, on a NIC that is gone). Two seconds of fake time after
// the rail failed and the traffic stopped: about 20 probes, each with a turn to post it and a
// turn or two to read its answer, and the turns of the close bound (10 ms here) after the last
// message; not 2,000. The device still moves a message at once afterwards.
TEST(KeeperWithADownRail, SleepsUntilTheProbeIsDue) {
  FakePlugin::Options options = fakeOptions(fakeFamilies()[3], 11);  // efa, rdma, 2 rails
  ASSERT_EQ(fakeFamilies()[3].rails, 2u);
  options.fabric.earlyCompletionOneIn = 0;
  options.fabric.maxDelay = 1;  // a probe's answer comes at the next progress or the one after
  options.fabric.longDelayOneIn = 0;
  options.settings["NCCL_FABRIC_RAIL_PROBE_MS"] = "100";
  options.settings["NCCL_FABRIC_CLOSE_TIMEOUT_MS"] = "10";
  WarnCounter warnings;
  FakePlugin fake(options);
  FakePlugin::Pair pair;
  ASSERT_TRUE(fake.connect(&pair));
  constexpr size_t kBytes = 1 << 20;  // striped over both rails: a share on rail 1
  std::vector<uint8_t> out(kBytes), in(kBytes);
  void* sendHandle = fake.registerMemory(pair.send, out.data(), out.size());
  void* recvHandle = fake.registerMemory(pair.recv, in.data(), in.size());
  core::Plugin& plugin = fake.plugin();
  auto transfer = [&](uint64_t message) {
    fillPattern(out.data(), kBytes, message);
    core::Request* recv;
    core::Request* send;
    ASSERT_NO_FATAL_FAILURE(fake.postOneEach(pair, 1, in.data(), kBytes, recvHandle, out.data(),
                                             kBytes, sendHandle, &recv, &send));
    int sendDone = 0, recvDone = 0;
    for (int step = 0; step < 1000000 && (sendDone == 0 || recvDone == 0); ++step) {
      if (sendDone == 0) {
        ASSERT_EQ(plugin.test(send, &sendDone, nullptr, nullptr), abi::kSuccess);
      }
      if (recvDone == 0) {
        ASSERT_EQ(plugin.test(recv, &recvDone, nullptr, nullptr), abi::kSuccess);
      }
      fake.turnKeepers();
    }
    ASSERT_TRUE(sendDone == 1 && recvDone == 1) << "message " << message << " did not end";
    EXPECT_TRUE(verifyPattern(in.data(), kBytes, message));
  };
  fake.fabric().failRail(1, 0);
  ASSERT_NO_FATAL_FAILURE(transfer(1));
  core::Device& sender = fake.device(0);
  ASSERT_NE(sender.railHealth().state(1), core::RailState::kUp) << "the rail did not go down";
  const uint64_t turnsBefore = sender.keeperTurns();
  const uint64_t probesBefore = fake.fabric().stats().failedReads;
  for (int step = 0; step < 20000; ++step) {  // 2 s in steps of 100 us
    fake.fabric().advanceClockBy(100000);
    fake.turnKeepers();
  }
  const uint64_t turns = sender.keeperTurns() - turnsBefore;
  const uint64_t probes = fake.fabric().stats().failedReads - probesBefore;
  std::printf("[ keeper   ] 2 s with rail 1 down and nothing else: %llu turns, %llu probes\n",
              static_cast<unsigned long long>(turns), static_cast<unsigned long long>(probes));
  EXPECT_GE(probes, 15u) << "the rail was not probed every 100 ms";
  EXPECT_LE(probes, 25u);
  EXPECT_LE(turns, 100u) << "the keeper turned every millisecond for a down rail";
  // A message right after: the keeper wakes for it as before.
  ASSERT_NO_FATAL_FAILURE(transfer(2));
  fake.deregisterMemory(pair.send, sendHandle);
  fake.deregisterMemory(pair.recv, recvHandle);
  EXPECT_EQ(fake.closeSend(pair.send), abi::kSuccess);
  EXPECT_EQ(fake.closeRecv(pair.recv), abi::kSuccess);
}

INSTANTIATE_TEST_SUITE_P(Families, KeeperOverFakeFabric, ::testing::ValuesIn(keeperCases()),
                         [](const ::testing::TestParamInfo<KeeperCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace nnf::test
