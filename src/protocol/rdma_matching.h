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

}  // namespace nnf::protocol::rdma
