#include "core/request.h"

#include <new>
#include <type_traits>

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
  static_assert(sizeof(Request) % alignof(Operation) == 0 && alignof(Request) <= 16 &&
                alignof(Operation) <= 16);
  static_assert(std::is_trivially_destructible_v<Request> &&
                std::is_trivially_destructible_v<Operation>);
  if (created_ >= capacity_) return false;
  size_t count = std::min(chunks_.empty() ? kFirstChunk : kChunk, capacity_ - created_);
  std::unique_ptr<uint8_t[]> chunk(new (std::nothrow) uint8_t[count * stride_]);
  if (!chunk) return false;
  free_.reserve(created_ + count);
  // Hand out low addresses first: friendlier to caches and to reading traces.
  for (size_t i = count; i-- > 0;) {
    uint8_t* slot = chunk.get() + i * stride_;
    auto* request = new (slot) Request;
    request->comm = comm_;
    request->pool = this;
    for (size_t k = 0; k < inlineOps_; ++k) {
      auto* op = new (slot + sizeof(Request) + k * sizeof(Operation)) Operation;
      op->request = request;
      op->index = static_cast<uint8_t>(k);
      if (k == 0) request->ops = op;
    }
    free_.push_back(request);
  }
  chunks_.push_back({std::move(chunk), count});
  created_ += count;
  return true;
}

}  // namespace nnf::core
