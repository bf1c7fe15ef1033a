// The receiver's bounce entries (rdma_eager.h): what each holds, and the frees returned to the
// sender in eager order.
#pragma once

#include <cstdint>

#include "protocol/rdma_eager.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

// The receiver's entries: what each holds, and the frees to return in eager order.
class EagerInbox {
 public:
  enum class State : uint8_t { kEmpty, kHeld, kCopying, kFreed };
  struct Entry {
    State state = State::kEmpty;
    uint8_t generations = 0;  // messages it took so far (modulo 256)
    int32_t tag = 0;
    uint16_t seq = 0;
    uint32_t length = 0;
  };

  // An eager message landed in `entry`; false when the entry was not free (a broken sender).
  bool land(uint32_t entry, int32_t tag, uint16_t seq, uint32_t length) {
    if (entry >= kEagerEntries || entries_[entry].state != State::kEmpty) return false;
    Entry& taken = entries_[entry];
    taken = Entry{State::kHeld, static_cast<uint8_t>(taken.generations + 1), tag, seq, length};
    ++held_;
    return true;
  }
  // Whether the message of `generation` (modulo kEagerGenerations, as the immediate carries it)
  // is the one `entry` takes next. The sender writes generation g + 1 only after the receiver
  // freed g, so what lands is g + 1 or a second landing of g: never further apart.
  bool expects(uint32_t entry, uint32_t generation) const {
    return entry < kEagerEntries &&
           entries_[entry].generations % kEagerGenerations == generation % kEagerGenerations;
  }
  // Whether `entry` took the message of `generation` already (the same bound: it took it, or
  // it is the next one).
  bool took(uint32_t entry, uint32_t generation) const {
    return entry < kEagerEntries && !expects(entry, generation);
  }
  // The held entry of (tag, seq), or kEagerEntries. Receives mostly take eager messages in the
  // order they were written: the entry after the last one found is looked at first, so that
  // a receiver behind its sender does not walk every entry on every receive.
  uint32_t find(int32_t tag, uint16_t seq) {
    if (held_ == 0) return kEagerEntries;
    for (uint32_t i = 0, e = next_; i < kEagerEntries; ++i, e = (e + 1) % kEagerEntries) {
      const Entry& entry = entries_[e];
      if (entry.state == State::kHeld && entry.tag == tag && entry.seq == seq) {
        next_ = (e + 1) % kEagerEntries;
        return e;
      }
    }
    return kEagerEntries;
  }
  const Entry& at(uint32_t entry) const { return entries_[entry]; }
  // Its message is being copied out by an RDMA read: the entry stays held until free().
  void copying(uint32_t entry) {
    if (entries_[entry].state == State::kHeld) --held_;
    entries_[entry].state = State::kCopying;
  }
  // Its message was copied out (or dropped). Returns the entries now freed in eager order.
  uint64_t free(uint32_t entry) {
    if (entries_[entry].state == State::kHeld) --held_;
    entries_[entry].state = State::kFreed;
    while (entries_[freed_ % kEagerEntries].state == State::kFreed) {
      entries_[freed_ % kEagerEntries].state = State::kEmpty;
      ++freed_;
    }
    return freed_;
  }
  uint64_t freed() const { return freed_; }
  uint32_t held() const { return held_; }

 private:
  Entry entries_[kEagerEntries];
  uint64_t freed_ = 0;  // entries freed in eager order (the sender's entry freed_ % n is next)
  uint32_t held_ = 0;
  uint32_t next_ = 0;  // where find() looks first
};

}  // namespace nnf::protocol::rdma
