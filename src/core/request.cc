#include "core/request.h"

#include <new>

namespace nnf::core {

bool OpPool::grow() {
  std::unique_ptr<Operation[]> chunk(new (std::nothrow) Operation[opsPerBlock_ * blocksPerChunk_]);
  if (!chunk) return false;
  free_.reserve(free_.size() + blocksPerChunk_);
  for (size_t block = blocksPerChunk_; block-- > 0;) {
    Operation* ops = &chunk[block * opsPerBlock_];
    for (size_t i = 0; i < opsPerBlock_; ++i) ops[i].index = static_cast<uint8_t>(i);
    free_.push_back(ops);
  }
  chunks_.push_back(std::move(chunk));
  return true;
}

bool RequestPool::grow() {
  if (created_ >= capacity_) return false;
  size_t count = std::min(kChunk, capacity_ - created_);
  std::unique_ptr<Request[]> chunk(new (std::nothrow) Request[kChunk]);
  if (!chunk) return false;
  free_.reserve(created_ + count);
  // Hand out low addresses first: friendlier to caches and to reading traces.
  for (size_t i = count; i-- > 0;) {
    chunk[i].comm = comm_;
    chunk[i].pool = this;
    free_.push_back(&chunk[i]);
  }
  chunks_.push_back(std::move(chunk));
  created_ += count;
  return true;
}

}  // namespace nnf::core
