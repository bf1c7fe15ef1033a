// The order-free bookkeeping of the rdma protocol, kept apart from libfabric so that unit tests
// can drive it with completions in any order (tests/unit/rdma_matching_test.cc).
//
// Sender: descriptors (one per receive buffer) and sends meet by (NCCL tag, sequence number);
// whichever comes first waits in a fixed table for the other. Receiver: a buffer is complete
// when every segment of its message has landed; segments and their lengths arrive in any order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

// A descriptor that arrived before its send: where it lies in the sender's ring (the ring entry
// stays valid until the send has written, since the receiver reuses a slot only after every
// buffer of it completed).
struct Arrived {
  int32_t tag;
  uint16_t seq;
  uint8_t slot;
  uint8_t index;
};

// A send waiting for its descriptor, in storage the caller provides (the rdma protocol uses the
// send's own operation context, which is ours while nothing is posted), chained FIFO.
struct WaitLink {
  WaitLink* next = nullptr;
  int32_t tag = 0;
  uint16_t seq = 0;
};

class SendMatcher {
 public:
  SendMatcher() = default;
  SendMatcher(const SendMatcher&) = delete;  // the waiting list points into itself
  SendMatcher& operator=(const SendMatcher&) = delete;

  // The descriptor table cannot outgrow its bound: the receiver describes at most kSlots
  // groups at once. Waiting sends need no table: they are linked through their own storage.
  static constexpr size_t kMaxEntries = size_t{kSlots} * kGroup;
  // Receives of one buffer each describe at most one a slot.
  static constexpr size_t kSingleEntries = kSlots;

  // The table is reserved by the matcher's first use, a waiting send or an early descriptor (an
  // idle comm holds none): one entry a slot, and the whole bound once a group of several
  // buffers comes (expectGroup), so that the data path never allocates whichever side runs
  // ahead later (allocation_test under load). Most comms never see a group: 256 bytes, not 2 KiB
  // (scale_test's 10,000 comms).
  void addDescriptor(const Arrived& arrived) {
    reserveOnce();
    // Stale descriptors (their receives given up) may exceed one a slot: the table grows once.
    if (descriptors_.size() == descriptors_.capacity()) descriptors_.reserve(kMaxEntries);
    descriptors_.push_back(arrived);
  }
  // A group of `count` buffers is being read: several take the whole bound, once.
  void expectGroup(uint32_t count) {
    if (count > 1 && descriptors_.capacity() < kMaxEntries) descriptors_.reserve(kMaxEntries);
  }
  // The descriptor for (tag, seq), removed from the table; false when it has not arrived.
  bool takeDescriptor(int32_t tag, uint16_t seq, Arrived* out) {
    for (size_t i = 0; i < descriptors_.size(); ++i) {
      if (descriptors_[i].tag == tag && descriptors_[i].seq == seq) {
        *out = descriptors_[i];
        descriptors_.erase(descriptors_.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
    }
    return false;
  }
  // A send waits for its descriptor in `link` until taken.
  void addWaiting(WaitLink* link, int32_t tag, uint16_t seq) {
    reserveOnce();
    link->next = nullptr;
    link->tag = tag;
    link->seq = seq;
    *waitingTail_ = link;
    waitingTail_ = &link->next;
    ++waiting_;
  }
  // The oldest send waiting for (tag, seq), unlinked; null when none waits. Oldest first, so
  // that a stale entry (a send given up) is found before a newer one could be.
  WaitLink* takeWaiting(int32_t tag, uint16_t seq) {
    for (WaitLink** at = &waitingHead_; *at != nullptr; at = &(*at)->next) {
      WaitLink* link = *at;
      if (link->tag != tag || link->seq != seq) continue;
      *at = link->next;
      if (waitingTail_ == &link->next) waitingTail_ = at;
      --waiting_;
      return link;
    }
    return nullptr;
  }
  // The oldest waiting send for which `pick(link)` is true, unlinked; null when none is.
  template <typename Pick>
  WaitLink* takeFirstWaiting(Pick&& pick) {
    for (WaitLink** at = &waitingHead_; *at != nullptr; at = &(*at)->next) {
      WaitLink* link = *at;
      if (!pick(*link)) continue;
      *at = link->next;
      if (waitingTail_ == &link->next) waitingTail_ = at;
      --waiting_;
      return link;
    }
    return nullptr;
  }
  // Unlinks `link` if it waits (a send given up); its storage is then the caller's again.
  bool removeWaiting(const WaitLink* link) {
    for (WaitLink** at = &waitingHead_; *at != nullptr; at = &(*at)->next) {
      if (*at != link) continue;
      *at = link->next;
      if (waitingTail_ == &link->next) waitingTail_ = at;
      --waiting_;
      return true;
    }
    return false;
  }
  size_t descriptorsHeld() const { return descriptors_.size(); }
  size_t sendsWaiting() const { return waiting_; }
  size_t capacity() const { return descriptors_.capacity(); }

 private:
  void reserveOnce() {
    if (descriptors_.capacity() == 0) descriptors_.reserve(kSingleEntries);
  }
  // Few entries wait at a time: a linear search beats hashing.
  std::vector<Arrived> descriptors_;
  WaitLink* waitingHead_ = nullptr;
  WaitLink** waitingTail_ = &waitingHead_;
  size_t waiting_ = 0;
};

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
