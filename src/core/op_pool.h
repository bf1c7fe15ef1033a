// Operations for requests, shared by every comm of a device and handed out in blocks of a fixed
// size (1 for sends and flushes, maxRecvs for grouped receives). Memory then follows what is in
// flight, not the number of comms: an idle comm holds no operation. Blocks come from chunks
// allocated when the free list runs dry and kept for reuse, so a steady stream of messages
// allocates nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/operation.h"

namespace nnf::core {

class OpPool {
 public:
  explicit OpPool(size_t opsPerBlock, size_t blocksPerChunk = 64)
      : opsPerBlock_(opsPerBlock), blocksPerChunk_(blocksPerChunk) {}
  OpPool(const OpPool&) = delete;
  OpPool& operator=(const OpPool&) = delete;

  size_t opsPerBlock() const { return opsPerBlock_; }
  // A block of opsPerBlock() operations, each with its index set; nullptr when out of memory.
  Operation* acquire() {
    if (free_.empty() && !grow()) return nullptr;
    Operation* block = free_.back();
    free_.pop_back();
    return block;
  }
  // Every operation of the block is back from the provider.
  void release(Operation* block) { free_.push_back(block); }
  size_t blocksAllocated() const { return chunks_.size() * blocksPerChunk_; }
  size_t blocksFree() const { return free_.size(); }

 private:
  bool grow();

  size_t opsPerBlock_;
  size_t blocksPerChunk_;
  std::vector<std::unique_ptr<Operation[]>> chunks_;
  std::vector<Operation*> free_;
};

}  // namespace nnf::core
