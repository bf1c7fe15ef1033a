// The receiver's accounting of one grouped receive (a descriptor slot): for each buffer, the
// segments of its message that landed (segments and their lengths arrive in any order), or the
// eager message that filled it and the void the sender still owes for it (docs/architecture.md,
// "A buffer in a slot"). Kept apart from libfabric so that unit tests can drive it with
// completions in any order (tests/unit/rdma_matching_test.cc, rdma_eager_test.cc,
// rdma_states_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "protocol/rdma_wire.h"
#include "protocol/state_machine.h"

namespace nnf::protocol::rdma {

enum class SegmentOutcome : uint8_t { kPending, kComplete, kTruncated, kInvalid };

// The states of one buffer of a slot's group (the three that accept a segment come first).
enum class BufferState : uint8_t {
  kIdle,          // not in the slot's group
  kExpecting,     // in the group: waits for its message's segments, or for its eager message
  kVoidFirst,     // the sender's void came first: its eager message is on the way
  kFilling,       // some segments of its message landed
  kAwaitingVoid,  // an eager message filled it; the sender's void for its descriptor is to come
  kEnded,         // complete, truncated, filled before it was described, or refused: nothing more
};
constexpr size_t kBufferStates = 6;

inline const char* stateName(BufferState state) {
  switch (state) {
    case BufferState::kIdle:
      return "idle";
    case BufferState::kExpecting:
      return "expecting";
    case BufferState::kVoidFirst:
      return "void first";
    case BufferState::kFilling:
      return "filling";
    case BufferState::kAwaitingVoid:
      return "awaiting void";
    case BufferState::kEnded:
      return "ended";
  }
  return "?";
}

class SlotProgress {
 public:
  // A new group of `count` buffers of `sizes` bytes: each expects its message (whatever it held
  // before: the slot's previous group has ended). Only buffers of this group and of the last one
  // are touched (every receive pays for this): those past both are idle already.
  void arm(uint32_t count, const uint64_t* sizes) {
    uint32_t previous = count_;
    count_ = static_cast<uint8_t>(count < kGroup ? count : kGroup);
    for (uint32_t i = count_; i < previous; ++i) to(buffers_[i], BufferState::kIdle);
    for (uint32_t i = 0; i < count_; ++i) {
      Buffer& buffer = buffers_[i];
      buffer.capacity = sizes[i];
      buffer.bytes = 0;
      buffer.segments = 0;
      buffer.seen = 0;
      buffer.ignoredRails = 0;
      buffer.ignoredVoidRails = 0;
      memset(buffer.seenOn, 0, sizeof(buffer.seenOn));
      memset(buffer.bytesOn, 0, sizeof(buffer.bytesOn));
      to(buffer, BufferState::kExpecting);
    }
  }
  // Buffers in the group of the last arm() (until disarm()).
  uint32_t groupSize() const { return count_; }
  BufferState state(uint32_t index) const { return buffers_[index].state; }
  // The slot is released: its buffers leave the group, whatever they were waiting for.
  void disarm() {
    for (uint32_t i = 0; i < count_; ++i) to(buffers_[i], BufferState::kIdle);
    count_ = 0;
  }
  // One segment of `length` bytes landed in buffer `index` on rail `rail`; the message has
  // `segments` of them (0: a truncation notice). kComplete once all have; *total then holds the
  // message's size. kInvalid for what no buffer expects (a broken peer's write), which then ends
  // the buffer. A segment on a rail the buffer was reset for (resetRail) is a late original of a
  // share written again: ignored (kPending).
  SegmentOutcome onSegment(uint32_t index, uint32_t segments, uint64_t length, uint64_t* total,
                           size_t rail = 0) {
    if (index >= kGroup || !acceptsSegments(buffers_[index].state)) return SegmentOutcome::kInvalid;
    Buffer& buffer = buffers_[index];
    if ((buffer.ignoredRails >> rail & 1u) != 0) return SegmentOutcome::kPending;
    if (segments == 0) {
      to(buffer, BufferState::kEnded);
      return SegmentOutcome::kTruncated;
    }
    if (buffer.segments == 0) buffer.segments = static_cast<uint8_t>(segments);
    if (buffer.segments != segments || buffer.seen >= segments ||
        buffer.bytes + length > buffer.capacity) {
      to(buffer, BufferState::kEnded);
      return SegmentOutcome::kInvalid;
    }
    buffer.bytes += length;
    buffer.bytesOn[rail] += length;
    ++buffer.seenOn[rail];
    if (++buffer.seen < segments) {
      to(buffer, BufferState::kFilling);
      return SegmentOutcome::kPending;
    }
    to(buffer, BufferState::kEnded);
    *total = buffer.bytes;
    return SegmentOutcome::kComplete;
  }
  // The sender's write of a share of buffer `index` on `rail` failed on a broken path and may
  // have partly landed (RailQuery): when the buffer still waits for segments, what landed on that
  // rail is forgotten (its segments and their bytes: every share the sender put on that rail, one
  // written again onto it after another rail failed included), later segments on that rail are
  // ignored, and true: the sender writes every share it put on that rail again, whole, on rails
  // the buffer does not ignore (ignoredRails). False when the buffer ended (nothing to write).
  bool resetRail(uint32_t index, size_t rail) {
    if (index >= count_ || rail >= kMaxRails || !acceptsSegments(buffers_[index].state)) {
      return false;
    }
    Buffer& buffer = buffers_[index];
    buffer.seen = static_cast<uint8_t>(buffer.seen - buffer.seenOn[rail]);
    buffer.bytes -= buffer.bytesOn[rail];
    buffer.seenOn[rail] = 0;
    buffer.bytesOn[rail] = 0;
    buffer.ignoredRails = static_cast<uint8_t>(buffer.ignoredRails | 1u << rail);
    return true;
  }
  // Bit r: buffer `index` ignores what lands on rail r (its count there was reset).
  uint32_t ignoredRails(uint32_t index) const {
    return index < count_ ? buffers_[index].ignoredRails : 0;
  }
  // An eager message filled buffer `index` before this group was described: the sender skips
  // its descriptor (kSettled), nothing more comes for it.
  void settle(uint32_t index) {
    if (index < count_) to(buffers_[index], BufferState::kEnded);
  }
  // An eager message of `length` bytes came for buffer `index` of a posted receive. When the
  // buffer was described (`described`), the sender answers that descriptor with a void, and the
  // slot is reused only after it (voidsOwed); an undescribed one owes nothing. kComplete (or
  // kTruncated) at once: the data is the eager message's.
  SegmentOutcome onEager(uint32_t index, uint64_t length, bool described = true) {
    if (index >= kGroup) return SegmentOutcome::kInvalid;
    Buffer& buffer = buffers_[index];
    BufferState now = buffer.state;
    if (now != BufferState::kExpecting && now != BufferState::kVoidFirst) {
      return SegmentOutcome::kInvalid;
    }
    to(buffer, described && now == BufferState::kExpecting ? BufferState::kAwaitingVoid
                                                           : BufferState::kEnded);
    return length > buffer.capacity ? SegmentOutcome::kTruncated : SegmentOutcome::kComplete;
  }
  // The sender's void for buffer `index` (before or after its eager message), on `rail`; false
  // when the group has no such buffer. One on a rail the buffer's void was reset for
  // (resetVoid) is a late original of a void written again: ignored.
  bool onVoid(uint32_t index, size_t rail = 0) {
    if (index >= count_) return false;
    Buffer& buffer = buffers_[index];
    if ((buffer.ignoredVoidRails >> rail & 1u) != 0) return true;
    if (buffer.state == BufferState::kAwaitingVoid) {
      to(buffer, BufferState::kEnded);
    } else if (buffer.state == BufferState::kExpecting) {
      to(buffer, BufferState::kVoidFirst);
    }
    return true;
  }
  // The sender's void for buffer `index` failed on `rail`, a broken path (RailQuery, kVoidQuery):
  // true when the buffer still waits for it (its eager message filled it, or is on the way):
  // voids on that rail are ignored for the buffer from now on, and the sender writes it again
  // on another. False when it landed (the buffer saw its void) or the buffer has none to wait for.
  bool resetVoid(uint32_t index, size_t rail) {
    if (index >= count_ || rail >= kMaxRails) return false;
    Buffer& buffer = buffers_[index];
    if (buffer.state != BufferState::kAwaitingVoid && buffer.state != BufferState::kExpecting) {
      return false;
    }
    buffer.ignoredVoidRails = static_cast<uint8_t>(buffer.ignoredVoidRails | 1u << rail);
    return true;
  }
  // Voids still to come: the sender may not have read the slot's descriptors yet.
  bool voidsOwed() const {
    for (uint32_t i = 0; i < count_; ++i) {
      if (buffers_[i].state == BufferState::kAwaitingVoid) return true;
    }
    return false;
  }

 private:
  struct Buffer {
    uint64_t capacity = 0;
    uint64_t bytes = 0;
    uint8_t segments = 0;  // 0: none seen yet
    uint8_t seen = 0;
    uint8_t ignoredRails = 0;      // bit r: rail r's share was reset (resetRail): late ones ignored
    uint8_t ignoredVoidRails = 0;  // bit r: its void on rail r was reset (resetVoid)
    BufferState state = BufferState::kIdle;
    uint8_t seenOn[kMaxRails] = {};    // segments seen per rail (kMaxSegments fits a byte)
    uint64_t bytesOn[kMaxRails] = {};  // their bytes (a rail may carry two shares: resetRail)
  };
  static bool acceptsSegments(BufferState state) {
    return static_cast<uint8_t>(state) - 1u <= static_cast<uint8_t>(BufferState::kFilling) - 1u;
  }
  static constexpr Transitions<BufferState, kBufferStates> kAllowed{
      // A group starts: every buffer expects its message (a new group may follow any state).
      {BufferState::kIdle, BufferState::kExpecting},
      {BufferState::kExpecting, BufferState::kExpecting},
      {BufferState::kVoidFirst, BufferState::kExpecting},
      {BufferState::kFilling, BufferState::kExpecting},
      {BufferState::kAwaitingVoid, BufferState::kExpecting},
      {BufferState::kEnded, BufferState::kExpecting},
      // Segments, eager messages and voids.
      {BufferState::kExpecting, BufferState::kVoidFirst},
      {BufferState::kExpecting, BufferState::kFilling},
      {BufferState::kExpecting, BufferState::kAwaitingVoid},
      {BufferState::kExpecting, BufferState::kEnded},
      {BufferState::kVoidFirst, BufferState::kFilling},
      {BufferState::kVoidFirst, BufferState::kEnded},
      {BufferState::kFilling, BufferState::kFilling},
      {BufferState::kFilling, BufferState::kEnded},
      {BufferState::kAwaitingVoid, BufferState::kEnded},
      // The group ends (the slot is released, or a smaller group follows).
      {BufferState::kExpecting, BufferState::kIdle},
      {BufferState::kVoidFirst, BufferState::kIdle},
      {BufferState::kFilling, BufferState::kIdle},
      {BufferState::kAwaitingVoid, BufferState::kIdle},
      {BufferState::kEnded, BufferState::kIdle},
  };
  // The one transition function of a buffer.
  static void to(Buffer& buffer, BufferState next) {
    checkTransition(kAllowed, "receive buffer", buffer.state, next);
    buffer.state = next;
  }

  Buffer buffers_[kGroup];
  uint8_t count_ = 0;  // buffers armed by the last arm()
};

}  // namespace nnf::protocol::rdma
