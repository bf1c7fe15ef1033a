// An RMA context (createContext): NCCL's handle for issuing operations, with `nContexts`
// independent streams inside it. All of them map onto the device's endpoints (one per rail,
// shared with the net plugin): a stream is a number NCCL passes, not a resource. The context
// owns the request pool (grown in chunks as NCCL first keeps more in flight, never per
// operation afterwards) and the list of its unfinished requests in issue order, which a flush
// waits on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "rma/handles.h"
#include "rma/request.h"

namespace nnf::rma {

class Group;

class Context {
 public:
  Context(Group& group, int streams);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void* handle() { return &ref_; }
  Group& group() const { return group_; }
  int streams() const { return streams_; }
  bool alive() const { return ref_.magic == HandleRef::kMagicAlive; }
  void kill() { ref_.magic = HandleRef::kMagicDead; }

  // Device lock held. nullptr only when memory runs out.
  Request* acquire(RequestKind kind, uint32_t peer);
  void release(Request& request);
  // Issue order of the unfinished requests (a flush is done once it is the oldest).
  void unlink(Request& request);
  bool oldest(const Request& request) const { return head_ == &request; }
  Request* oldest() const { return head_; }
  size_t inUse() const { return inUse_; }
  template <typename Visit>
  void forEach(Visit&& visit) {
    for (auto& chunk : chunks_) {
      for (size_t i = 0; i < kChunk; ++i) visit(chunk[i]);
    }
  }

 private:
  static constexpr size_t kChunk = 32;
  HandleRef ref_;  // first: what NCCL holds
  Group& group_;
  int streams_;
  std::vector<std::unique_ptr<Request[]>> chunks_;
  std::vector<Request*> free_;
  Request* head_ = nullptr;
  Request* tail_ = nullptr;
  size_t inUse_ = 0;
};

}  // namespace nnf::rma
