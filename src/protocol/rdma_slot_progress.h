// The receiver's accounting of one grouped receive (a descriptor slot): for each buffer, the
// segments of its message that landed (segments and their lengths arrive in any order), or the
// eager message that filled it and the void the sender still owes for it. Kept apart from
// libfabric so that unit tests can drive it with completions in any order
// (tests/unit/rdma_matching_test.cc, rdma_eager_test.cc).
#pragma once

#include <cstdint>

#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

enum class SegmentOutcome : uint8_t { kPending, kComplete, kTruncated, kInvalid };

// Segment accounting of one grouped receive (a descriptor slot).
class SlotProgress {
 public:
  // Only buffers of this group and of the last one are touched (every receive pays for this):
  // those past both were disarmed before, or never armed.
  void arm(uint32_t count, const uint64_t* sizes) {
    uint32_t previous = count_;
    count_ = static_cast<uint8_t>(count < kGroup ? count : kGroup);
    for (uint32_t i = count_; i < previous; ++i) buffers_[i].armed = false;
    for (uint32_t i = 0; i < count_; ++i) {
      Buffer& buffer = buffers_[i];
      buffer = Buffer{};
      buffer.armed = true;
      buffer.capacity = sizes[i];
    }
  }
  // Buffers in the group of the last arm() (until disarm()).
  uint32_t groupSize() const { return count_; }
  void disarm() {
    for (uint32_t i = 0; i < count_; ++i) buffers_[i].armed = false;
    count_ = 0;
  }
  // One segment of `length` bytes landed in buffer `index`; the message has `segments` of them
  // (0: a truncation notice). kComplete once all have; *total then holds the message's size.
  SegmentOutcome onSegment(uint32_t index, uint32_t segments, uint64_t length, uint64_t* total) {
    if (index >= kGroup || !buffers_[index].armed) return SegmentOutcome::kInvalid;
    Buffer& buffer = buffers_[index];
    if (segments == 0) {
      buffer.armed = false;
      return SegmentOutcome::kTruncated;
    }
    if (buffer.segments == 0) buffer.segments = static_cast<uint8_t>(segments);
    if (buffer.segments != segments || buffer.seen >= segments ||
        buffer.bytes + length > buffer.capacity) {
      buffer.armed = false;
      return SegmentOutcome::kInvalid;
    }
    buffer.bytes += length;
    if (++buffer.seen < segments) return SegmentOutcome::kPending;
    buffer.armed = false;
    *total = buffer.bytes;
    return SegmentOutcome::kComplete;
  }

  // An eager message filled buffer `index` before this group was described: the sender skips
  // its descriptor (kSettled), nothing more comes for it.
  void settle(uint32_t index) {
    if (index < kGroup) buffers_[index].armed = false;
  }
  // An eager message of `length` bytes came for buffer `index` of a posted receive. When the
  // buffer was described (`described`), the sender answers that descriptor with a void, and the
  // slot is reused only after it (voidsOwed); an undescribed one owes nothing. kComplete (or
  // kTruncated) at once: the data is the eager message's.
  SegmentOutcome onEager(uint32_t index, uint64_t length, bool described = true) {
    if (index >= kGroup || !buffers_[index].armed || buffers_[index].seen != 0) {
      return SegmentOutcome::kInvalid;
    }
    Buffer& buffer = buffers_[index];
    buffer.armed = false;
    buffer.awaitingVoid = described && !buffer.voidSeen;
    return length > buffer.capacity ? SegmentOutcome::kTruncated : SegmentOutcome::kComplete;
  }
  // The sender's void for buffer `index` (before or after its eager message); false when the
  // group has no such buffer.
  bool onVoid(uint32_t index) {
    if (index >= count_) return false;
    Buffer& buffer = buffers_[index];
    if (buffer.awaitingVoid) {
      buffer.awaitingVoid = false;
    } else {
      buffer.voidSeen = true;
    }
    return true;
  }
  // Voids still to come: the sender may not have read the slot's descriptors yet.
  bool voidsOwed() const {
    for (uint32_t i = 0; i < count_; ++i) {
      if (buffers_[i].awaitingVoid) return true;
    }
    return false;
  }

 private:
  struct Buffer {
    uint64_t capacity = 0;
    uint64_t bytes = 0;
    uint8_t segments = 0;  // 0: none seen yet
    uint8_t seen = 0;
    bool armed = false;
    bool voidSeen = false;      // the sender's void came before its eager message
    bool awaitingVoid = false;  // filled by an eager message; the sender's void is still to come
  };
  Buffer buffers_[kGroup];
  uint8_t count_ = 0;  // buffers armed by the last arm()
};

}  // namespace nnf::protocol::rdma
