// The sender's credits for the receiver's bounce entries (rdma_eager.h): which entry the next
// eager message takes, if one is free.
#pragma once

#include <cstdint>

#include "protocol/rdma_eager.h"

namespace nnf::protocol::rdma {

// The sender's credits: which entry the next eager message takes, if any is free.
class EagerCredits {
 public:
  bool granted() const { return granted_; }
  // A credit write said that `freedMod256` entries have been freed so far. Credit writes may
  // arrive out of order: one older than what is known already is ignored.
  void onCredits(uint32_t freedMod256) {
    uint32_t delta = (freedMod256 - static_cast<uint32_t>(freed_)) & 0xff;
    granted_ = true;
    if (delta > kEagerEntries || freed_ + delta > used_) return;  // stale
    freed_ += delta;
  }
  // The entry of the next eager message, taken, and its generation there (the entry's uses
  // before it); false when every entry is held.
  bool take(uint32_t* entry, uint32_t* generation = nullptr) {
    if (!granted_ || used_ - freed_ >= kEagerEntries) return false;
    *entry = static_cast<uint32_t>(used_ % kEagerEntries);
    if (generation != nullptr) *generation = static_cast<uint32_t>(used_ / kEagerEntries);
    ++used_;
    return true;
  }
  uint64_t inUse() const { return used_ - freed_; }

 private:
  bool granted_ = false;
  uint64_t used_ = 0;   // eager messages written
  uint64_t freed_ = 0;  // entries the receiver freed (in eager order)
};

}  // namespace nnf::protocol::rdma
