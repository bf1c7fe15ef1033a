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
#include "support/patterns.h"

namespace nnf::test {
namespace {

// --- one comm pair's traffic: a plan of receives and the sends that match them ---

// Buffers of one side of a comm in three size classes, registered once as one region.
class BufferPool {
 public:
  BufferPool(FakePlugin& fake, void* comm, size_t maxBytes) : fake_(fake), comm_(comm) {
    const size_t sizes[kClasses] = {8192, 32768, maxBytes};
    const size_t counts[kClasses] = {256, 48, 6};
    size_t offset = 0;
    for (size_t c = 0; c < kClasses; ++c) {
      size_[c] = (sizes[c] + 63) / 64 * 64;
      for (size_t i = 0; i < counts[c]; ++i) {
        free_[c].push_back(slots_.size());
        slots_.push_back({offset, c});
        offset += size_[c];
      }
    }
    memory_.resize(offset / 8 + 1);
    handle_ = fake.registerMemory(comm, memory_.data(), offset);
    if (handle_ != nullptr) {
      auto* registered = static_cast<core::MemoryHandle*>(handle_);
      for (size_t r = 0; r < fake.device(0).railCount(); ++r) keys_.push_back(registered->key(r));
    }
  }
  ~BufferPool() {
    if (handle_ != nullptr) fake_.deregisterMemory(comm_, handle_);
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `size` bytes, or -1 when that class has none free.
  int take(size_t size) {
    for (size_t c = 0; c < kClasses; ++c) {
      if (size > size_[c]) continue;
      if (free_[c].empty()) return -1;
      int slot = static_cast<int>(free_[c].back());
      free_[c].pop_back();
      return slot;
    }
    return -1;
  }
  void give(int slot) { free_[slots_[static_cast<size_t>(slot)].cls].push_back(slot); }
  uint8_t* data(int slot) {
    return reinterpret_cast<uint8_t*>(memory_.data()) + slots_[static_cast<size_t>(slot)].offset;
  }
  void* handle() const { return handle_; }
  // The registration's keys, one a rail.
  const std::vector<uint64_t>& keys() const { return keys_; }

 private:
  static constexpr size_t kClasses = 3;
  struct Slot {
    size_t offset;
    size_t cls;
  };
  FakePlugin& fake_;
  void* comm_;
  size_t size_[kClasses];
  std::vector<size_t> free_[kClasses];
  std::vector<Slot> slots_;
  std::vector<uint64_t> memory_;
  void* handle_ = nullptr;
  std::vector<uint64_t> keys_;
};

struct TrafficCounts {
  uint64_t messages = 0;     // received whole and verified
  uint64_t truncated = 0;    // receives failed for a message larger than their buffer
  uint64_t sendsFailed = 0;  // sends of those failed at the sender (the described path)
  uint64_t grouped = 0;      // receives of more than one buffer
  uint64_t bytes = 0;
};

class Traffic {
 public:
  static constexpr int kTags = 3;
  static constexpr size_t kMaxOutstanding = 32;  // NCCL's requests per comm

  // `largePerMille`: messages of many segments (striped over the rails) per thousand, beside
  // the sizes' usual spread (0: only that, four in a thousand).
  Traffic(FakePlugin& fake, const FakePlugin::Pair& pair, uint64_t seed, uint64_t messages,
          size_t eagerBytes, uint32_t largePerMille = 0)
      : fake_(fake),
        pair_(pair),
        random_(seed),
        messages_(messages),
        eagerBytes_(eagerBytes),
        largePerMille_(largePerMille),
        maxBytes_(std::min<size_t>(fake.device(0).properties().maxMessageBytes, 432 << 10)),
        sendBuffers_(fake, pair.send, maxBytes_),
        recvBuffers_(fake, pair.recv, maxBytes_) {}

  bool done() const {
    return counts_.messages + counts_.truncated == messages_ && sends_.empty() && recvs_.empty();
  }
  const TrafficCounts& counts() const { return counts_; }
  // The keys of the send and the receive buffers' registrations (device 0's, then device 1's).
  std::vector<uint64_t> sendKeys() const { return sendBuffers_.keys(); }
  std::vector<uint64_t> recvKeys() const { return recvBuffers_.keys(); }

  // One step of the driver: post, or test, on either side, as the phase leans.
  void step() {
    // Phases of 1,500 messages: receives well ahead of their sends, in step, well behind.
    int phase = static_cast<int>((issued_ / 1500) % 3);
    int draw = static_cast<int>(random_() % 100);
    // The sender can issue nothing more before the receiver posts: the receiver must.
    bool stuck = sends_.size() >= kMaxOutstanding || issued_ == messages_ || senderBlocked_;
    switch (phase) {
      case 0:
        if (draw < 40) return postReceive();
        if (draw < 55) return postSend();
        break;
      case 1:
        if (draw < 25) return postReceive();
        if (draw < 50) return postSend();
        break;
      default:
        if (draw < 45) return postSend();
        if (draw < 60 && (stuck || issued_ >= posted_ + 8)) return postReceive();
        break;
    }
    if (draw % 2 == 0) {
      testReceive();
    } else {
      testSend();
    }
  }

  std::string describe() const {
    return "issued " + std::to_string(issued_) + " posted " + std::to_string(posted_) +
           " received " + std::to_string(counts_.messages) + " truncated " +
           std::to_string(counts_.truncated) + ", " + std::to_string(sends_.size()) +
           " sends and " + std::to_string(recvs_.size()) + " receives outstanding" + outstanding();
  }

 private:
  struct Planned {
    uint64_t id = 0;
    int tag = 0;
    uint64_t seq = 0;  // its place among the messages of its tag
    size_t size = 0;
    size_t capacity = 0;
    bool truncates() const { return size > capacity; }
  };
  struct Send {
    core::Request* request;
    Planned message;
    int slot;
  };
  struct Receive {
    core::Request* request;
    std::vector<Planned> buffers;
    std::vector<int> slots;
  };

  // The receives still outstanding: each buffer's message (id, tag, place in its tag, size,
  // buffer size).
  std::string outstanding() const {
    std::string text;
    for (const Receive& receive : recvs_) {
      text += " [receive";
      for (const Planned& message : receive.buffers) {
        text += " message " + std::to_string(message.id) + " tag " + std::to_string(message.tag) +
                " #" + std::to_string(message.seq) + " " + std::to_string(message.size) + " B in " +
                std::to_string(message.capacity);
      }
      text += "]";
    }
    return text;
  }

  size_t uniform(size_t low, size_t high) { return low + random_() % (high - low + 1); }

  // Sizes around the protocol's thresholds: empty, small, eager-sized, described, and messages
  // of many write segments.
  size_t messageSize() {
    if (largePerMille_ != 0 && random_() % 1000 < largePerMille_) return uniform(32769, maxBytes_);
    size_t draw = random_() % 1000;
    if (draw < 80) return 0;
    if (draw < 580) return uniform(1, 512);
    if (draw < 880) return uniform(513, eagerBytes_);
    if (draw < 996) return uniform(eagerBytes_ + 1, 32768);
    return uniform(32769, maxBytes_);
  }

  void plan() {
    Receive group;
    size_t count = std::min<size_t>(random_() % 10 < 6 ? 1 : uniform(2, 8), messages_ - planned_);
    for (size_t i = 0; i < count; ++i) {
      Planned message;
      message.id = nextId_++;
      message.tag = static_cast<int>(random_() % kTags);
      message.seq = plannedOfTag_[message.tag]++;
      message.size = messageSize();
      message.capacity =
          random_() % 2 == 0
              ? message.size
              : std::min(maxBytes_, message.size + message.size / 4 + random_() % 64);
      if (count == 1 && random_() % 200 == 0) {
        // Larger than its receive: the receive fails, the send fails (or, sent eagerly,
        // completes), the comm goes on.
        message.capacity = message.size / 2;
        message.size = std::min(maxBytes_, message.size + 1 + random_() % 4096);
      }
      group.buffers.push_back(message);
      toSend_[message.tag].push_back(message);
    }
    toPost_.push_back(group);
    planned_ += count;
  }

  void postReceive() {
    if (recvs_.size() >= kMaxOutstanding) return;
    if (toPost_.empty()) {
      if (planned_ >= messages_) return;
      plan();
    }
    Receive receive = toPost_.front();
    void* data[8];
    size_t sizes[8];
    int tags[8];
    void* handles[8];
    for (const Planned& message : receive.buffers) {
      int slot = recvBuffers_.take(message.capacity);
      if (slot < 0) {
        for (int taken : receive.slots) recvBuffers_.give(taken);
        return;
      }
      receive.slots.push_back(slot);
    }
    int count = static_cast<int>(receive.buffers.size());
    for (int i = 0; i < count; ++i) {
      data[i] = recvBuffers_.data(receive.slots[i]);
      sizes[i] = receive.buffers[i].capacity;
      tags[i] = receive.buffers[i].tag;
      handles[i] = recvBuffers_.handle();
      // What lands must be the message, not what the buffer held before.
      memset(data[i], 0xa5, std::min<size_t>(sizes[i] + 1, 64));
    }
    core::Request* request = nullptr;
    ASSERT_EQ(fake_.plugin().irecv(pair_.recv, count, data, sizes, tags, handles, &request),
              abi::kSuccess);
    if (request == nullptr) {  // no free slot yet: NCCL tries again later
      for (int taken : receive.slots) recvBuffers_.give(taken);
      return;
    }
    toPost_.erase(toPost_.begin());
    for (const Planned& message : receive.buffers) ++postedOfTag_[message.tag];
    receive.request = request;
    if (count > 1) ++counts_.grouped;
    posted_ += static_cast<uint64_t>(count);
    recvs_.push_back(std::move(receive));
  }

  void postSend() {
    if (sends_.size() >= kMaxOutstanding || issued_ == messages_) return;
    int tag = static_cast<int>(random_() % kTags);
    for (int t = 0; t < kTags && toSend_[tag].empty(); ++t) tag = (tag + 1) % kTags;
    if (toSend_[tag].empty()) {
      if (planned_ < messages_) plan();
      return;
    }
    Planned message = toSend_[tag].front();
    int slot = mayGoAhead(message) ? sendBuffers_.take(message.size) : -1;
    senderBlocked_ = slot < 0;
    if (slot < 0) return;
    fillPattern(sendBuffers_.data(slot), message.size, message.id);
    core::Request* request = nullptr;
    ASSERT_EQ(fake_.plugin().isend(pair_.send, sendBuffers_.data(slot), message.size, tag,
                                   sendBuffers_.handle(), &request),
              abi::kSuccess);
    if (request == nullptr) {
      sendBuffers_.give(slot);
      return;
    }
    toSend_[tag].erase(toSend_[tag].begin());
    ++issued_;
    sends_.push_back({request, message, slot});
  }

  // A send whose receive is not posted yet waits for it and holds its request and buffer: a few
  // may, so that the sends the posted receives wait for always find both (NCCL never lets its
  // sends get ahead further than its buffers either).
  bool mayGoAhead(const Planned& message) const {
    if (message.seq < postedOfTag_[message.tag]) return true;
    size_t ahead = 0;
    size_t large = 0;
    size_t medium = 0;
    for (const Send& send : sends_) {
      if (send.message.seq < postedOfTag_[send.message.tag]) continue;
      ++ahead;
      if (send.message.size > 32768) ++large;
      if (send.message.size > 8192) ++medium;
    }
    return ahead < 16 && (message.size <= 32768 || large < 2) &&
           (message.size <= 8192 || medium < 20);
  }

  void testSend() {
    if (sends_.empty()) return;
    size_t index = random_() % sends_.size();
    Send& send = sends_[index];
    int done = 0;
    size_t sizes[8] = {};
    int count = 0;
    abi::Result result = fake_.plugin().test(send.request, &done, sizes, &count);
    if (result == abi::kSuccess && done == 0) return;
    if (result != abi::kSuccess) {
      ASSERT_TRUE(send.message.truncates()) << "send of message " << send.message.id << " ("
                                            << send.message.size << " bytes) failed: " << result;
      ++counts_.sendsFailed;
    } else {
      ASSERT_EQ(count, 1);
      ASSERT_EQ(sizes[0], send.message.size) << "message " << send.message.id;
    }
    sendBuffers_.give(send.slot);
    sends_.erase(sends_.begin() + static_cast<std::ptrdiff_t>(index));
  }

  void testReceive() {
    if (recvs_.empty()) return;
    size_t index = random_() % recvs_.size();
    Receive& receive = recvs_[index];
    int done = 0;
    size_t sizes[8] = {};
    int count = 0;
    abi::Result result = fake_.plugin().test(receive.request, &done, sizes, &count);
    if (result == abi::kSuccess && done == 0) return;
    if (result != abi::kSuccess) {
      ASSERT_EQ(receive.buffers.size(), 1u);
      ASSERT_TRUE(receive.buffers[0].truncates())
          << "receive of message " << receive.buffers[0].id << " failed: " << result;
      ++counts_.truncated;
    } else {
      ASSERT_EQ(static_cast<size_t>(count), receive.buffers.size());
      for (size_t i = 0; i < receive.buffers.size(); ++i) {
        const Planned& message = receive.buffers[i];
        ASSERT_FALSE(message.truncates()) << "message " << message.id << " fit no buffer";
        ASSERT_EQ(sizes[i], message.size) << "message " << message.id << " (buffer " << i << ")";
        ASSERT_TRUE(verifyPattern(recvBuffers_.data(receive.slots[i]), message.size, message.id))
            << "tag " << message.tag;
        ++counts_.messages;
        counts_.bytes += message.size;
      }
    }
    for (int slot : receive.slots) recvBuffers_.give(slot);
    recvs_.erase(recvs_.begin() + static_cast<std::ptrdiff_t>(index));
  }

  FakePlugin& fake_;
  FakePlugin::Pair pair_;
  std::mt19937_64 random_;
  uint64_t messages_;
  size_t eagerBytes_;
  uint32_t largePerMille_;
  size_t maxBytes_;
  BufferPool sendBuffers_;
  BufferPool recvBuffers_;
  std::vector<Receive> toPost_;
  std::vector<Planned> toSend_[kTags];
  std::vector<Send> sends_;
  std::vector<Receive> recvs_;
  bool senderBlocked_ = false;  // the last send tried waits for a receive to be posted
  uint64_t plannedOfTag_[kTags] = {};
  uint64_t postedOfTag_[kTags] = {};
  uint64_t nextId_ = 1;
  uint64_t planned_ = 0;
  uint64_t issued_ = 0;  // sends accepted
  uint64_t posted_ = 0;  // receive buffers accepted
  TrafficCounts counts_;
};

uint64_t messagesToRun() {
  const char* env = getenv("NNF_FAKE_FABRIC_MESSAGES");
  return env != nullptr ? strtoull(env, nullptr, 10) : 250000;
}

// Other seeds and clocks, to explore (NNF_FAKE_FABRIC_SEED; NNF_FAKE_FABRIC_PAUSE_ONE_IN: how often
// the fabric's clock pauses, 0 never; NNF_FAKE_FABRIC_DEPART_WITH_SOURCE=1: every post and inject
// leaves at its source's next progress); CI runs the defaults.
FakePlugin::Options exploredOptions(const FakeFamily& family) {
  const char* seed = getenv("NNF_FAKE_FABRIC_SEED");
  FakePlugin::Options options =
      fakeOptions(family, seed != nullptr ? strtoull(seed, nullptr, 10) : 7);
  if (const char* pauses = getenv("NNF_FAKE_FABRIC_PAUSE_ONE_IN")) {
    options.fabric.pauseOneIn = static_cast<uint32_t>(strtoul(pauses, nullptr, 10));
  }
  if (const char* depart = getenv("NNF_FAKE_FABRIC_DEPART_WITH_SOURCE")) {
    options.fabric.departWithSourceProgress = strcmp(depart, "1") == 0;
  }
  return options;
}

// Messages that ended (received whole, or truncated) over every pair's traffic.
uint64_t messagesEnded(const std::vector<std::unique_ptr<Traffic>>& traffic) {
  uint64_t ended = 0;
  for (const auto& t : traffic) ended += t->counts().messages + t->counts().truncated;
  return ended;
}

// Steps the pairs' traffic, one picked at random each step, until every pair is done, turning
// the keepers as their threads would; `eachStep` (if set) runs after every step. Fails when no
// message ended in 2^20 steps.
void driveTraffic(FakePlugin& fake, const std::vector<std::unique_ptr<Traffic>>& traffic,
                  std::mt19937_64& pick, const std::function<void()>& eachStep = {}) {
  uint64_t lastDone = 0;
  for (uint64_t step = 1;; ++step) {
    Traffic& one = *traffic[pick() % traffic.size()];
    if (!one.done()) one.step();
    fake.turnKeepers();  // where the devices' keeper threads would progress them
    if (::testing::Test::HasFatalFailure()) return;
    if (eachStep) eachStep();
    if (step % (1u << 20) != 0) continue;
    bool all = true;
    for (const auto& t : traffic) all = all && t->done();
    if (all) return;
    uint64_t doneNow = messagesEnded(traffic);
    ASSERT_NE(doneNow, lastDone) << "no message ended in 2^20 steps: " << traffic[0]->describe()
                                 << "; " << traffic[1]->describe();
    lastDone = doneNow;
  }
}

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

// Rail failover over the fabric (issue 27, docs/architecture.md "A rail that fails"): a rail
// other than the leader, of two or of four, fails at a random point of a mixed run (every
// device's, as a NIC plane), 40 runs of their own seeds, and from then on
// what lands over it fails, a quarter of it after landing all the same (the acknowledgement
// lost: the receiver may count a segment the sender is told failed). Every message must still
// land once, whole, in its own buffer with its size: a share counted twice completes a buffer
// before its last bytes (the pattern check fails) or makes a segment invalid (the receive never
// ends), a share lost leaves a receive waiting. No send fails but the truncating ones, the rail's
// WARN comes once, and closing leaves nothing held. One message in 25 is striped and of many
// segments (a share may land in part); more would exhaust the driver's 6 large buffers. Eager
// messages are off: a failed one still fails its request (not recovered yet).
TEST(RdmaFailoverOverFakeFabric, ARailThatFailsMidRunLosesAndDoublesNothing) {
  const char* seedText = getenv("NNF_FAKE_FABRIC_SEED");
  const uint64_t firstSeed = seedText != nullptr ? strtoull(seedText, nullptr, 10) : 21;
  constexpr int kSeeds = 40;
  uint64_t failed = 0, failedLanded = 0;
  for (uint64_t seed = firstSeed; seed < firstSeed + kSeeds; ++seed) {
    FakeFamily family = fakeFamilies()[3];
    ASSERT_EQ(family.rails, 2u);
    if (seed % 2 == 1) family.rails = 4;
    std::mt19937_64 pick(seed);
    const size_t failing = 1 + pick() % (family.rails - 1);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", rail " + std::to_string(failing) + " of " +
                 std::to_string(family.rails));
    WarnCounter warnings;
    FakePlugin::Options options = fakeOptions(family, seed);
    options.fabric.earlyCompletionOneIn = 0;  // efa: a write completes once the target took it
    options.settings["NCCL_FABRIC_EAGER_MAX"] = "0";
    FakePlugin fake(options);
    constexpr size_t kPairs = 2;
    FakePlugin::Pair pairs[kPairs];
    for (FakePlugin::Pair& pair : pairs) ASSERT_TRUE(fake.connect(&pair));
    const uint64_t messages = messagesToRun() / kSeeds;
    const uint64_t failAt = messages / 5 + pick() % (messages * 3 / 5);
    TrafficCounts total;
    {
      std::vector<std::unique_ptr<Traffic>> traffic;
      for (size_t i = 0; i < kPairs; ++i) {
        traffic.push_back(std::make_unique<Traffic>(fake, pairs[i], seed * 10 + i,
                                                    messages / kPairs, family.eagerBytes,
                                                    /*largePerMille=*/40));
      }
      bool railFailed = false;
      uint64_t step = 0;
      driveTraffic(fake, traffic, pick, [&] {
        if (railFailed || ++step % 64 != 0 || messagesEnded(traffic) < failAt) return;
        fake.fabric().failRail(failing, 4);
        railFailed = true;
      });
      if (HasFatalFailure()) return;
      ASSERT_TRUE(railFailed);
      for (const auto& t : traffic) {
        total.messages += t->counts().messages;
        total.truncated += t->counts().truncated;
        total.sendsFailed += t->counts().sendsFailed;
      }
    }
    for (const FakePlugin::Pair& pair : pairs) {
      EXPECT_EQ(fake.closeSend(pair.send), abi::kSuccess);
      EXPECT_EQ(fake.closeRecv(pair.recv), abi::kSuccess);
    }
    EXPECT_TRUE(fake.nothingHeld());
    EXPECT_EQ(total.messages + total.truncated, messages / kPairs * kPairs);
    EXPECT_LE(total.sendsFailed, total.truncated);
    EXPECT_EQ(warnings.others(), 1) << "the rail's failure is named once, and nothing else";
    failed += fake.fabric().stats().failed;
    failedLanded += fake.fabric().stats().failedLanded;
  }
  printf(
      "[ failover ] %d seeds: %llu writes failed by the rail, %llu of them landed all the same\n",
      kSeeds, static_cast<unsigned long long>(failed),
      static_cast<unsigned long long>(failedLanded));
  // The run had the case it is for: writes in flight failed, some after they landed.
  EXPECT_GT(failed, 0u);
  EXPECT_GT(failedLanded, 0u);
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

  void* data[1] = {in.data()};
  size_t sizes[1] = {143};
  int tags[1] = {7};
  void* handles[1] = {recvHandle};
  core::Request* recv = nullptr;
  core::Request* send = nullptr;
  for (int tries = 0; tries < 1000 && recv == nullptr; ++tries) {
    ASSERT_EQ(plugin.irecv(pair.recv, 1, data, sizes, tags, handles, &recv), abi::kSuccess);
  }
  for (int tries = 0; tries < 1000 && send == nullptr; ++tries) {
    ASSERT_EQ(plugin.isend(pair.send, out.data(), out.size(), 7, sendHandle, &send), abi::kSuccess);
  }
  ASSERT_NE(recv, nullptr);
  ASSERT_NE(send, nullptr);
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
