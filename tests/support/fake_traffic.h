// Seeded traffic between the two devices of a FakePlugin (support/fake_plugin.h): a plan of
// receives and the sends that match them on one comm pair, sizes of every class, grouped
// receives, truncating sends, receives ahead of, in step with and behind their sends, every
// message's bytes checked; and the loop that drives several pairs at once. The rdma protocol's
// unit tests (rdma_protocol_test, rdma_failover_test) run the real protocol under it.
#pragma once

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

  // Every message from now on no larger than an eager entry (before the first step).
  void keepSmall() { smallOnly_ = true; }

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
    if (smallOnly_) return uniform(0, eagerBytes_);
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
  bool smallOnly_ = false;
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

inline uint64_t messagesToRun() {
  const char* env = getenv("NNF_FAKE_FABRIC_MESSAGES");
  return env != nullptr ? strtoull(env, nullptr, 10) : 250000;
}

// Other seeds and clocks, to explore (NNF_FAKE_FABRIC_SEED; NNF_FAKE_FABRIC_PAUSE_ONE_IN: how often
// the fabric's clock pauses, 0 never; NNF_FAKE_FABRIC_DEPART_WITH_SOURCE=1: every post and inject
// leaves at its source's next progress); CI runs the defaults.
inline FakePlugin::Options exploredOptions(const FakeFamily& family) {
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
inline uint64_t messagesEnded(const std::vector<std::unique_ptr<Traffic>>& traffic) {
  uint64_t ended = 0;
  for (const auto& t : traffic) ended += t->counts().messages + t->counts().truncated;
  return ended;
}

// Steps the pairs' traffic, one picked at random each step, until every pair is done, turning
// the keepers as their threads would; `eachStep` (if set) runs after every step. Fails when no
// message ended in 2^20 steps.
inline void driveTraffic(FakePlugin& fake, const std::vector<std::unique_ptr<Traffic>>& traffic,
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

}  // namespace nnf::test
