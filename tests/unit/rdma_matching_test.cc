// The rdma protocol's order-free bookkeeping (protocol/rdma_matching.h, rdma_wire.h) driven by a
// seeded fake transport: descriptors and data segments are delivered in random order with random
// delays (never dropped or duplicated, as SRD promises), sends are issued in program order per
// NCCL tag as NCCL does, and every message must land once, in its own buffer, with its size;
// a message larger than its buffer must be reported as truncated, and only such a one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <map>
#include <queue>
#include <random>
#include <vector>

#include "nccl_net/net.h"
#include "protocol/rdma_matching.h"
#include "protocol/rdma_slot_progress.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {
namespace {

TEST(RdmaImmediate, DataFieldsSurviveEncoding) {
  for (uint32_t comm : {1u, 77u, kMaxCommId}) {
    for (uint32_t slot : {0u, 5u, kSlots - 1}) {
      for (uint32_t index : {0u, 3u, kGroup - 1}) {
        for (uint32_t segments : {0u, 1u, kMaxSegments}) {
          Immediate imm = decode(encodeData(comm, slot, index, segments, 0xfffffffeu));
          EXPECT_EQ(imm.kind, ImmKind::kData);
          EXPECT_EQ(imm.commId, comm);
          EXPECT_EQ(imm.slot, slot);
          EXPECT_EQ(imm.index, index);
          EXPECT_EQ(imm.segments, segments);
          EXPECT_EQ(imm.length, 0xfffffffeu);
        }
      }
    }
  }
}

TEST(RdmaImmediate, DescriptorFieldsSurviveEncodingInFourBytes) {
  for (uint32_t count = 1; count <= kGroup; ++count) {
    uint64_t data = encodeDescriptors(kMaxCommId, kSlots - 1, count);
    EXPECT_EQ(data >> 32, 0u) << "EFA carries 4 bytes of immediate data";
    Immediate imm = decode(data);
    EXPECT_EQ(imm.kind, ImmKind::kDescriptors);
    EXPECT_EQ(imm.commId, kMaxCommId);
    EXPECT_EQ(imm.slot, kSlots - 1);
    EXPECT_EQ(imm.count, count);
  }
}

TEST(RdmaMatching, DescriptorAndSendMeetWhicheverComesFirst) {
  SendMatcher matcher;
  WaitLink link, other, given;
  matcher.addWaiting(&link, 7, 1);
  matcher.addWaiting(&given, 9, 1);
  matcher.addWaiting(&other, 7, 3);
  EXPECT_EQ(matcher.takeWaiting(7, 2), nullptr);
  EXPECT_EQ(matcher.takeWaiting(8, 1), nullptr);
  EXPECT_EQ(matcher.takeWaiting(7, 1), &link);
  EXPECT_EQ(matcher.takeWaiting(7, 1), nullptr) << "taken once";
  EXPECT_TRUE(matcher.removeWaiting(&given)) << "a send given up leaves the list";
  EXPECT_FALSE(matcher.removeWaiting(&given));
  EXPECT_EQ(matcher.takeWaiting(9, 1), nullptr);
  EXPECT_EQ(matcher.takeWaiting(7, 3), &other) << "the tail survives removals before it";
  WaitLink last;
  matcher.addWaiting(&last, 1, 1);
  EXPECT_EQ(matcher.takeWaiting(1, 1), &last) << "appending after the list emptied";
  EXPECT_EQ(matcher.sendsWaiting(), 0u);
  matcher.addDescriptor(Arrived{7, 2, 3, 1});
  Arrived out;
  EXPECT_FALSE(matcher.takeDescriptor(7, 1, &out));
  ASSERT_TRUE(matcher.takeDescriptor(7, 2, &out));
  EXPECT_EQ(out.slot, 3);
  EXPECT_EQ(out.index, 1);
  EXPECT_EQ(matcher.descriptorsHeld(), 0u);
}

// The receiver may run a whole ring ahead of its sender, and a sender a whole request pool
// ahead of its receiver: neither may allocate on the data path.
TEST(RdmaMatching, TablesHoldTheirBoundWithoutGrowing) {
  SendMatcher matcher;
  WaitLink first;
  matcher.addWaiting(&first, 0, 0);  // a first waiting send reserves the descriptor table too
  EXPECT_GE(matcher.capacity(), SendMatcher::kSingleEntries) << "one entry a slot at least";
  EXPECT_EQ(matcher.takeWaiting(0, 0), &first);
  // Receives of one buffer: one descriptor a slot, without growing.
  const size_t single = matcher.capacity();
  for (size_t i = 0; i < SendMatcher::kSingleEntries; ++i) {
    matcher.addDescriptor(Arrived{3, static_cast<uint16_t>(i), static_cast<uint8_t>(i), 0});
  }
  EXPECT_EQ(matcher.capacity(), single) << "single-buffer receives grew the table";
  for (size_t i = 0; i < SendMatcher::kSingleEntries; ++i) {
    Arrived out;
    ASSERT_TRUE(matcher.takeDescriptor(3, static_cast<uint16_t>(i), &out));
  }
  // The first group takes the whole bound; nothing grows after it.
  matcher.expectGroup(kGroup);
  const size_t reserved = matcher.capacity();
  EXPECT_GE(reserved, SendMatcher::kMaxEntries);
  matcher.addDescriptor(Arrived{0, 0, 0, 0});
  for (size_t i = 1; i < SendMatcher::kMaxEntries; ++i) {
    matcher.addDescriptor(Arrived{2, static_cast<uint16_t>(i), 0, 0});
  }
  EXPECT_EQ(matcher.descriptorsHeld(), SendMatcher::kMaxEntries);
  EXPECT_EQ(matcher.capacity(), reserved) << "the table grew: the data path allocated";
  std::vector<WaitLink> links(size_t{abi::kMaxRequests} * kGroup);
  for (size_t i = 0; i < links.size(); ++i) {
    matcher.addWaiting(&links[i], 1, static_cast<uint16_t>(i));
  }
  EXPECT_EQ(matcher.sendsWaiting(), links.size());
  EXPECT_EQ(matcher.capacity(), reserved) << "waiting sends must not need a table";
}

TEST(RdmaMatching, SlotProgressRejectsWhatNoReceiveExpects) {
  SlotProgress slot;
  uint64_t total = 0;
  EXPECT_EQ(slot.onSegment(0, 1, 10, &total), SegmentOutcome::kInvalid) << "never armed";
  uint64_t sizes[2] = {100, 50};
  slot.arm(2, sizes);
  EXPECT_EQ(slot.onSegment(2, 1, 10, &total), SegmentOutcome::kInvalid)
      << "buffer index past the group";
  EXPECT_EQ(slot.onSegment(1, 1, 51, &total), SegmentOutcome::kInvalid)
      << "more bytes than the buffer holds";
  EXPECT_EQ(slot.onSegment(0, 2, 60, &total), SegmentOutcome::kPending);
  EXPECT_EQ(slot.onSegment(0, 3, 10, &total), SegmentOutcome::kInvalid)
      << "segment count disagrees with the first segment";
  slot.arm(2, sizes);
  EXPECT_EQ(slot.onSegment(0, 2, 60, &total), SegmentOutcome::kPending);
  EXPECT_EQ(slot.onSegment(0, 2, 40, &total), SegmentOutcome::kComplete);
  EXPECT_EQ(total, 100u);
  EXPECT_EQ(slot.onSegment(0, 2, 1, &total), SegmentOutcome::kInvalid)
      << "a completed buffer takes nothing more";
  EXPECT_EQ(slot.onSegment(1, 0, 0, &total), SegmentOutcome::kTruncated);
  slot.disarm();
  EXPECT_EQ(slot.onSegment(1, 1, 0, &total), SegmentOutcome::kInvalid) << "disarmed";
}

// A slot re-armed for a smaller group, with or without a release between, takes nothing for the
// buffers past it: arm() and disarm() touch only the buffers in use, not all eight.
TEST(RdmaMatching, ASlotReArmedForFewerBuffersRejectsTheOthers) {
  SlotProgress slot;
  uint64_t total = 0;
  uint64_t sizes[3] = {10, 20, 30};
  slot.arm(3, sizes);
  EXPECT_EQ(slot.groupSize(), 3u);
  slot.arm(1, sizes);
  EXPECT_EQ(slot.groupSize(), 1u);
  EXPECT_EQ(slot.onSegment(1, 1, 5, &total), SegmentOutcome::kInvalid)
      << "left from the group of 3";
  EXPECT_EQ(slot.onSegment(2, 1, 5, &total), SegmentOutcome::kInvalid)
      << "left from the group of 3";
  EXPECT_EQ(slot.onSegment(0, 1, 10, &total), SegmentOutcome::kComplete);
  slot.arm(2, sizes);
  slot.disarm();
  EXPECT_EQ(slot.groupSize(), 0u);
  slot.arm(1, sizes);
  EXPECT_EQ(slot.onSegment(1, 1, 5, &total), SegmentOutcome::kInvalid) << "released, then re-armed";
  EXPECT_EQ(slot.onSegment(0, 1, 7, &total), SegmentOutcome::kComplete);
  EXPECT_EQ(total, 7u);
}

// --- the fake transport ---

struct Event {
  uint64_t time;
  uint64_t order;  // ties broken by a random draw, not by posting order
  bool descriptor;
  uint64_t immediate;
  uint64_t length;  // data: segment bytes
  bool operator>(const Event& other) const {
    return time != other.time ? time > other.time : order > other.order;
  }
};

class Simulation {
 public:
  explicit Simulation(uint32_t seed) : random_(seed) {}

  // Runs until `messages` sends have been matched and every buffer has completed.
  void run(uint64_t messages) {
    while (completed_ + truncated_ < messages || !events_.empty()) {
      if (issued_ < messages) {
        postReceives();
        postSends(messages);
      }
      if (events_.empty()) {
        ASSERT_LT(issued_, messages) << "stalled: nothing in flight and nothing left to issue";
        continue;
      }
      Event event = events_.top();
      events_.pop();
      now_ = event.time;
      if (event.descriptor) {
        ASSERT_NO_FATAL_FAILURE(deliverDescriptors(event));
      } else {
        ASSERT_NO_FATAL_FAILURE(deliverSegment(event));
      }
    }
    EXPECT_EQ(matcher_.sendsWaiting(), 0u);
    // Buffers posted past the last message keep their descriptors; nothing else is left.
    EXPECT_EQ(matcher_.descriptorsHeld(), posted_ - issued_);
    EXPECT_GT(truncated_, 0u) << "the run should include messages too large for their buffer";
  }
  uint64_t completed() const { return completed_; }
  uint64_t truncated() const { return truncated_; }

 private:
  static constexpr uint32_t kComm = 4242;
  static constexpr int kTags = 3;

  struct Buffer {
    int32_t tag;
    uint16_t seq;
    uint64_t capacity;
    bool done = false;
  };
  struct Receive {
    std::vector<Buffer> buffers;
    uint32_t remaining = 0;
    bool active = false;
  };
  struct Send {
    WaitLink link;  // first: a Send is found from its link
    int32_t tag;
    uint16_t seq;
    uint64_t size;
  };

  uint64_t delay() { return std::uniform_int_distribution<uint64_t>(1, 1000)(random_); }
  void schedule(Event event) {
    event.time = now_ + delay();
    event.order = random_();
    events_.push(event);
  }

  // The receiver keeps up to kSlots grouped receives posted, random groups of random buffers.
  void postReceives() {
    for (uint32_t slot = 0; slot < kSlots; ++slot) {
      if (receives_[slot].active || std::uniform_int_distribution<int>(0, 3)(random_) != 0) {
        continue;
      }
      Receive& receive = receives_[slot];
      uint32_t count = std::uniform_int_distribution<uint32_t>(1, kGroup)(random_);
      receive.buffers.clear();
      uint64_t sizes[kGroup];
      BufferDescriptor* entries = ring_[slot];
      for (uint32_t i = 0; i < count; ++i) {
        int32_t tag = std::uniform_int_distribution<int32_t>(0, kTags - 1)(random_);
        uint16_t seq = recvSeq_[tag]++;
        uint64_t capacity = std::uniform_int_distribution<uint64_t>(0, 1 << 20)(random_);
        receive.buffers.push_back({tag, seq, capacity});
        ++posted_;
        sizes[i] = capacity;
        entries[i] = BufferDescriptor{};
        entries[i].address = 0x10000000ull * slot + i;
        entries[i].size = capacity;
        entries[i].keys[0] = 1000u + slot;
        entries[i].tag = tag;
        entries[i].seq = seq;
        expected_[{tag, seq}] = capacity;
      }
      receive.remaining = count;
      receive.active = true;
      progress_[slot].arm(count, sizes);
      Event event{};
      event.descriptor = true;
      event.immediate = encodeDescriptors(kComm, slot, count);
      schedule(event);
    }
  }

  // The sender issues sends in program order per tag, up to what receives will exist for.
  void postSends(uint64_t limit) {
    for (int32_t tag = 0; tag < kTags && issued_ < limit; ++tag) {
      while (sendSeq_[tag] != recvSeq_[tag] && issued_ < limit) {
        uint16_t seq = sendSeq_[tag]++;
        uint64_t capacity = expected_.at({tag, seq});
        // One message in 64 is larger than its buffer; the rest fill it or less.
        bool tooLarge = std::uniform_int_distribution<int>(0, 63)(random_) == 0;
        uint64_t size =
            tooLarge ? capacity + 1 + std::uniform_int_distribution<uint64_t>(0, 4096)(random_)
                     : std::uniform_int_distribution<uint64_t>(0, capacity)(random_);
        sends_.push_back({WaitLink{}, tag, seq, size});
        sent_[{tag, seq}] = size;
        ++issued_;
        Arrived arrived;
        if (matcher_.takeDescriptor(tag, seq, &arrived)) {
          write(sends_.back(), arrived);
          sends_.pop_back();
        } else {
          matcher_.addWaiting(&sends_.back().link, tag, seq);
        }
      }
    }
  }

  // The sender copies the descriptors out of its ring as the completion tells it to.
  void deliverDescriptors(const Event& event) {
    Immediate imm = decode(event.immediate);
    ASSERT_EQ(imm.kind, ImmKind::kDescriptors);
    ASSERT_EQ(imm.commId, kComm);
    for (uint32_t i = 0; i < imm.count; ++i) {
      const BufferDescriptor& buffer = ring_[imm.slot][i];
      Arrived arrived{buffer.tag, buffer.seq, static_cast<uint8_t>(imm.slot),
                      static_cast<uint8_t>(i)};
      WaitLink* link = matcher_.takeWaiting(buffer.tag, buffer.seq);
      auto* send = link != nullptr ? reinterpret_cast<Send*>(link) : nullptr;
      if (send != nullptr) {
        write(*send, arrived);
        auto it = std::find_if(sends_.begin(), sends_.end(),
                               [send](const Send& s) { return &s == send; });
        ASSERT_NE(it, sends_.end());
        sends_.erase(it);
      } else {
        matcher_.addDescriptor(arrived);
      }
    }
  }

  // A matched send: a truncation notice, or 1..kMaxSegments segments of random lengths.
  void write(const Send& send, const Arrived& arrived) {
    const BufferDescriptor& buffer = ring_[arrived.slot][arrived.index];
    ASSERT_EQ(buffer.tag, send.tag);
    ASSERT_EQ(buffer.seq, send.seq);
    Event event{};
    if (send.size > buffer.size) {
      event.immediate =
          encodeData(kComm, arrived.slot, arrived.index, 0, static_cast<uint32_t>(send.size));
      schedule(event);
      return;
    }
    uint32_t segments = std::uniform_int_distribution<uint32_t>(
        1, static_cast<uint32_t>(
               std::min<uint64_t>(kMaxSegments, std::max<uint64_t>(send.size, 1))))(random_);
    uint64_t left = send.size;
    for (uint32_t s = 0; s < segments; ++s) {
      uint64_t length = s + 1 == segments ? left : left / (segments - s);
      left -= length;
      event.length = length;
      event.immediate =
          encodeData(kComm, arrived.slot, arrived.index, segments, static_cast<uint32_t>(length));
      schedule(event);
    }
  }

  void deliverSegment(const Event& event) {
    Immediate imm = decode(event.immediate);
    ASSERT_EQ(imm.kind, ImmKind::kData);
    ASSERT_EQ(imm.commId, kComm);
    if (imm.segments != 0) {
      ASSERT_EQ(imm.length, event.length) << "the length travels in the immediate data";
    }
    Receive& receive = receives_[imm.slot];
    ASSERT_TRUE(receive.active);
    ASSERT_LT(imm.index, receive.buffers.size());
    Buffer& buffer = receive.buffers[imm.index];
    uint64_t sentSize = sent_.at({buffer.tag, buffer.seq});
    uint64_t total = 0;
    switch (progress_[imm.slot].onSegment(imm.index, imm.segments, imm.length, &total)) {
      case SegmentOutcome::kPending:
        return;
      case SegmentOutcome::kComplete:
        ASSERT_FALSE(buffer.done);
        ASSERT_EQ(total, sentSize) << "tag " << buffer.tag << " seq " << buffer.seq;
        ++completed_;
        break;
      case SegmentOutcome::kTruncated:
        ASSERT_FALSE(buffer.done);
        ASSERT_GT(sentSize, buffer.capacity) << "only a message too large is truncated";
        ++truncated_;
        break;
      case SegmentOutcome::kInvalid:
        FAIL() << "a segment the tracker did not expect (slot " << imm.slot << ", buffer "
               << imm.index << ")";
    }
    buffer.done = true;
    sent_.erase({buffer.tag, buffer.seq});
    expected_.erase({buffer.tag, buffer.seq});
    if (--receive.remaining == 0) {
      receive.active = false;
      progress_[imm.slot].disarm();
    }
  }

  std::mt19937_64 random_;
  uint64_t now_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  SendMatcher matcher_;
  SlotProgress progress_[kSlots];
  BufferDescriptor ring_[kSlots][kGroup] = {};
  Receive receives_[kSlots];
  uint16_t recvSeq_[kTags] = {};
  uint16_t sendSeq_[kTags] = {};
  std::list<Send> sends_;  // waiting sends: stable addresses for the matcher's cookies
  std::map<std::pair<int32_t, uint16_t>, uint64_t> expected_;  // buffer capacity by (tag, seq)
  std::map<std::pair<int32_t, uint16_t>, uint64_t> sent_;      // message size by (tag, seq)
  uint64_t posted_ = 0;                                        // receive buffers described
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  uint64_t truncated_ = 0;
};

uint64_t messagesToRun() {
  const char* env = std::getenv("NNF_RDMA_SIM_MESSAGES");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 1000000;
}

TEST(RdmaMatching, AMillionMessagesLandInTheirBuffersUnderAnyDeliveryOrder) {
  const uint64_t messages = messagesToRun();
  for (uint32_t seed : {1u, 2u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Simulation simulation(seed);
    ASSERT_NO_FATAL_FAILURE(simulation.run(messages / 2));
    EXPECT_EQ(simulation.completed() + simulation.truncated(), messages / 2);
  }
}

}  // namespace
}  // namespace nnf::protocol::rdma
