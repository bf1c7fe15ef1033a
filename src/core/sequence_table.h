// Per-comm counters of messages per NCCL tag (see tags.h). NCCL uses a handful of tags per comm
// (one per peer rank sharing it): the table starts small and doubles when it fills, up to the
// capacity chosen at comm creation, so an idle comm costs a few bytes and the hot path allocates
// only when a comm meets a new tag beyond its current size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace nnf::core {

class SequenceTable {
 public:
  // `start`: every tag's first number (0; NCCL_FABRIC_SEQUENCE_START lets tests begin near the
  // wrap of the bits the protocols carry).
  explicit SequenceTable(size_t capacity, size_t initial = 8, uint32_t start = 0)
      : capacity_(roundUp(capacity)),
        start_(start),
        slots_(std::min(roundUp(initial), roundUp(capacity))) {}
  SequenceTable(const SequenceTable&) = delete;  // last_ points into slots_
  SequenceTable& operator=(const SequenceTable&) = delete;

  // Returns the next sequence number for `tag` and advances it, or -1 when the table holds
  // `capacity` other tags already (the caller fails the operation with a clear error).
  int64_t next(int32_t tag) {
    // A comm carries one tag in long runs (NCCL's peer rank): the last one answers most calls.
    if (last_ != nullptr && last_->tag == tag) return last_->count++;
    for (;;) {
      size_t mask = slots_.size() - 1;
      for (size_t probe = 0, i = hash(tag) & mask; probe < slots_.size();
           ++probe, i = (i + 1) & mask) {
        Slot& slot = slots_[i];
        if (!slot.used) {
          // Keep the table at most half full (short probes); grow before taking the slot.
          if (2 * (used_ + 1) > slots_.size() && slots_.size() < capacity_) break;
          if (used_ == capacity_) return -1;
          slot.used = true;
          slot.tag = tag;
          slot.count = start_;
          ++used_;
        }
        if (slot.tag == tag) {
          last_ = &slot;
          return slot.count++;
        }
      }
      if (slots_.size() >= capacity_) return -1;
      grow();
    }
  }

  // The next sequence number of `tag` without taking it (the start for a tag never seen).
  uint32_t peek(int32_t tag) const {
    size_t mask = slots_.size() - 1;
    for (size_t probe = 0, i = hash(tag) & mask; probe < slots_.size();
         ++probe, i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (!slot.used) return start_;
      if (slot.tag == tag) return slot.count;
    }
    return start_;
  }

  size_t capacity() const { return capacity_; }

 private:
  struct Slot {
    int32_t tag = 0;
    bool used = false;
    uint32_t count = 0;
  };
  static size_t roundUp(size_t n) {
    size_t size = 1;
    while (size < n) size <<= 1;
    return size;
  }
  static size_t hash(int32_t tag) { return static_cast<uint32_t>(tag) * 0x9e3779b1u >> 7; }
  void grow() {
    last_ = nullptr;
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    size_t mask = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (!slot.used) continue;
      size_t i = hash(slot.tag) & mask;
      while (slots_[i].used) i = (i + 1) & mask;
      slots_[i] = slot;
    }
  }
  size_t capacity_;
  uint32_t start_;
  size_t used_ = 0;
  std::vector<Slot> slots_;
  Slot* last_ = nullptr;  // the slot next() answered last (reset when the table grows)
};

}  // namespace nnf::core
