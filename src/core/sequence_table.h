// Per-comm counters of messages per NCCL tag (see tags.h). Fixed capacity chosen at comm
// creation: NCCL uses a handful of tags per comm (one per peer rank sharing it), and the hot
// path must not allocate.
#pragma once

#include <cstdint>
#include <vector>

namespace nnf::core {

class SequenceTable {
 public:
  explicit SequenceTable(size_t capacity) : slots_(roundUp(capacity)) {}

  // Returns the next sequence number for `tag` and advances it, or -1 when the table is full of
  // other tags (the caller fails the operation with a clear error).
  int64_t next(int32_t tag) {
    size_t mask = slots_.size() - 1;
    for (size_t probe = 0, i = hash(tag) & mask; probe < slots_.size();
         ++probe, i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (!slot.used) {
        slot.used = true;
        slot.tag = tag;
      }
      if (slot.tag == tag) return slot.count++;
    }
    return -1;
  }

  size_t capacity() const { return slots_.size(); }

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
  std::vector<Slot> slots_;
};

}  // namespace nnf::core
