// The real rdma protocol, sender and receiver, between two real devices of one plugin over the
// in-memory fabric (support/fake_plugin.h), every delivery and completion reordered and delayed,
// seeded: 10^6 messages of mixed sizes, and what the plugin reports of each checked. What runs is
// what the plugin runs (core::Plugin's entry points, the comms, the protocol's own decisions);
// only the provider underneath is the fake. Why any order is safe: docs/architecture.md, "The
// operation engine" and "Why any order is fine".
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/memory_handle.h"
#include "core/request.h"
#include "support/fake_rdma_run.h"
#include "support/fake_traffic.h"
#include "support/patterns.h"

namespace nnf::test {
namespace {

class RdmaOverFakeFabric : public ::testing::TestWithParam<FakeFamily> {};

// 10^6 messages in all (a quarter on each family), mixed sizes, grouped receives, truncating
// sends, receives ahead of, in step with and behind their sends: every message lands once, whole,
// in its own buffer, with the size test() reports; the eager and the described paths both carry
// messages; closing leaves nothing held.
TEST_P(RdmaOverFakeFabric, MixedMessagesLandWholeUnderAnyDeliveryOrder) {
  const FakeFamily& mode = GetParam();
  WarnCounter warnings;
  const FakePlugin::Options options = exploredOptions(mode);
  FakePlugin fake(options);
  WriteCounts writes;
  countWrites(fake.fabric(), &writes);
  constexpr size_t kPairs = 2;
  FakePlugin::Pair pairs[kPairs];
  for (FakePlugin::Pair& pair : pairs) ASSERT_TRUE(fake.connect(&pair));

  const uint64_t messages = messagesToRun();
  TrafficCounts total;
  std::vector<uint64_t> sendKeys;
  std::vector<uint64_t> recvKeys;
  {
    std::vector<std::unique_ptr<Traffic>> traffic;
    for (size_t i = 0; i < kPairs; ++i) {
      traffic.push_back(
          std::make_unique<Traffic>(fake, pairs[i], 100 + i, messages / kPairs, mode.eagerBytes));
    }
    std::mt19937_64 pick(11);
    driveTraffic(fake, traffic, pick);
    if (HasFatalFailure()) return;
    for (const auto& t : traffic) {
      for (uint64_t key : t->sendKeys()) sendKeys.push_back(key);
      for (uint64_t key : t->recvKeys()) recvKeys.push_back(key);
      total.messages += t->counts().messages;
      total.truncated += t->counts().truncated;
      total.sendsFailed += t->counts().sendsFailed;
      total.grouped += t->counts().grouped;
      total.bytes += t->counts().bytes;
    }
  }  // the buffers are deregistered, as NCCL does before it closes
  for (const FakePlugin::Pair& pair : pairs) {
    EXPECT_EQ(fake.closeSend(pair.send), abi::kSuccess);
    EXPECT_EQ(fake.closeRecv(pair.recv), abi::kSuccess);
  }
  EXPECT_TRUE(fake.nothingHeld());
  for (uint64_t key : sendKeys) EXPECT_EQ(fake.engine(0).keys().find(key), nullptr) << key;
  for (uint64_t key : recvKeys) EXPECT_EQ(fake.engine(1).keys().find(key), nullptr) << key;

  const FakeStats& stats = fake.fabric().stats();
  printf(
      "[ %s ] %llu messages (%llu truncated, %llu grouped receives, %.1f MB); writes: %llu "
      "segments, %llu eager, %llu descriptor groups, %llu voids, %llu credits, %llu notices; "
      "fabric: %llu reordered, %llu held, %llu completed early, %llu injected, %llu pauses\n",
      mode.name, static_cast<unsigned long long>(total.messages),
      static_cast<unsigned long long>(total.truncated),
      static_cast<unsigned long long>(total.grouped), static_cast<double>(total.bytes) / 1e6,
      static_cast<unsigned long long>(writes.segments),
      static_cast<unsigned long long>(writes.eager),
      static_cast<unsigned long long>(writes.descriptors),
      static_cast<unsigned long long>(writes.voids),
      static_cast<unsigned long long>(writes.credits),
      static_cast<unsigned long long>(writes.notices),
      static_cast<unsigned long long>(stats.reordered), static_cast<unsigned long long>(stats.held),
      static_cast<unsigned long long>(stats.early), static_cast<unsigned long long>(stats.injects),
      static_cast<unsigned long long>(stats.pauses));
  EXPECT_EQ(total.messages + total.truncated, messages / kPairs * kPairs);
  EXPECT_GT(total.truncated, 0u);
  EXPECT_GT(total.grouped, 0u);
  EXPECT_LE(total.sendsFailed, total.truncated);
  // Both paths carried messages, and the run was as disordered as the fabric claims.
  EXPECT_GT(writes.eager, messages / 100) << "the eager path was hardly taken";
  EXPECT_GT(writes.segments, messages / 10) << "the described path was hardly taken";
  EXPECT_GT(writes.notices, 0u) << "no truncation was refused at the sender";
  EXPECT_GT(stats.held, 0u);
  EXPECT_GT(stats.early, 0u);
  // The clock paused past the quiet and late-description times: those paths ran too, the same
  // way in every run of the seed.
  if (options.fabric.pauseOneIn != 0) {
    EXPECT_GT(stats.pauses, 0u);
  }
  if (!mode.rail.deliversInOrder) {
    EXPECT_GT(stats.reordered, messages / 100);
  }
  EXPECT_GE(static_cast<uint64_t>(warnings.truncations()), total.truncated);
  EXPECT_EQ(warnings.others(), 0);
}

// A send larger than its receive is refused at the sender, which writes the receiver a notice
// (no data) so that the receive fails too. NCCL hears of the send's failure at once and may never
// call this sender again; the notice, held back by a full queue, must still go (the device's
// keeper progresses it), or the receive waits for ever.
TEST_P(RdmaOverFakeFabric, ARefusedSendsNoticeGoesOutThoughItsSenderIsNeverCalledAgain) {
  const FakeFamily& mode = GetParam();
  WarnCounter warnings;
  FakePlugin::Options options = fakeOptions(mode, 5);
  options.fabric.holdOneIn = 1;  // every post waits, as behind a full provider queue
  FakePlugin fake(options);
  FakePlugin::Pair pair;
  ASSERT_TRUE(fake.connect(&pair));
  std::vector<uint8_t> out(1 << 16), in(1 << 16);
  void* sendHandle = fake.registerMemory(pair.send, out.data(), out.size());
  void* recvHandle = fake.registerMemory(pair.recv, in.data(), in.size());
  core::Plugin& plugin = fake.plugin();

  core::Request* recv;
  core::Request* send;
  ASSERT_NO_FATAL_FAILURE(fake.postOneEach(pair, 7, in.data(), 143, recvHandle, out.data(),
                                           out.size(), sendHandle, &recv, &send));
  // NCCL tests both until the send ends: it fails (its message does not fit).
  int sendDone = 0;
  abi::Result sendResult = abi::kSuccess;
  for (int step = 0; step < 100000 && sendResult == abi::kSuccess && sendDone == 0; ++step) {
    int done = 0;
    ASSERT_EQ(plugin.test(recv, &done, nullptr, nullptr), abi::kSuccess);
    ASSERT_EQ(done, 0) << "the receive completed before the sender saw its buffer";
    sendResult = plugin.test(send, &sendDone, nullptr, nullptr);
    fake.turnKeepers();
  }
  ASSERT_NE(sendResult, abi::kSuccess) << "the send of a message too large did not fail";
  // From now on only the receiver's side is called (and the keepers run as their threads would).
  abi::Result recvResult = abi::kSuccess;
  int recvDone = 0;
  for (int step = 0; step < 200000 && recvResult == abi::kSuccess && recvDone == 0; ++step) {
    recvResult = plugin.test(recv, &recvDone, nullptr, nullptr);
    fake.turnKeepers();
  }
  EXPECT_NE(recvResult, abi::kSuccess)
      << (recvDone != 0 ? "the receive of a refused send completed"
                        : "the receive of a refused send never ended: its notice stayed held");
  EXPECT_EQ(fake.closeSend(pair.send), abi::kSuccess);
  EXPECT_EQ(fake.closeRecv(pair.recv), abi::kSuccess);
  fake.deregisterMemory(pair.send, sendHandle);
  fake.deregisterMemory(pair.recv, recvHandle);
  EXPECT_TRUE(fake.nothingHeld());
  EXPECT_EQ(warnings.truncations(), 2) << "one truncation WARN on each side";
}

INSTANTIATE_TEST_SUITE_P(Families, RdmaOverFakeFabric, ::testing::ValuesIn(fakeFamilies()),
                         familyName);

}  // namespace
}  // namespace nnf::test
