// Requests handed to NCCL by isend / irecv / iflush, and the fixed pool they come from. A
// request completes only when every one of its operations has completed, in whatever order the
// provider reports them (SRD does not order completions).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/op_pool.h"
#include "core/operation.h"
#include "nccl_net/types.h"

namespace nnf::core {

class DataComm;
struct MemoryHandle;

class RequestPool;

struct Request {
  static constexpr uint32_t kMagic = 0x5251464eu;  // "NFQR"
  // kAbandoned: failed and already reported to NCCL, but some operations are still with the
  // provider; it returns to the pool when the last one completes.
  enum class State : uint8_t { kFree, kActive, kDone, kFailed, kAbandoned };

  uint32_t magic = kMagic;
  State state = State::kFree;
  uint8_t count = 0;      // operations in this request (0 while free)
  uint8_t remaining = 0;  // operations not completed yet
  uint16_t slot = 0;      // the protocol's name for it (rdma: its descriptor slot)
  abi::Result error = abi::kSuccess;
  uint64_t postedNs = 0;  // steady clock of the first stall check (0: not checked yet)
  DataComm* comm = nullptr;
  RequestPool* pool = nullptr;
  Operation* ops = nullptr;  // a block from the device's OpPool while not free
  // A send's registration, held while its operations are with the provider or queued for it
  // (MemoryHandle::activeUses); null otherwise.
  MemoryHandle* heldRegistration = nullptr;
};

// A comm's requests: at most `capacity`, created in chunks as the comm first needs them (an idle
// comm holds none). Requests of one operation (sends, flushes) carry it with them; those of
// several (grouped receives) take a block from the device's OpPool while in use, so that memory
// follows what is in flight.
class RequestPool {
 public:
  // `ops` null: `inlineOps` operations per request, carried inline (a send striped over the
  // rails of a device has one for each).
  RequestPool(DataComm* comm, size_t capacity, OpPool* ops, size_t inlineOps = 1)
      : comm_(comm),
        capacity_(capacity),
        ops_(ops),
        inlineOps_(ops == nullptr ? inlineOps : 0),
        stride_(sizeof(Request) + inlineOps_ * sizeof(Operation)) {}
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // nullptr when all requests are in use (NCCL then retries) or memory ran out.
  Request* acquire(uint8_t count) {
    if (free_.empty() && !grow()) return nullptr;
    Request* request = free_.back();
    if (ops_ != nullptr) {
      Operation* ops = ops_->acquire();
      if (ops == nullptr) return nullptr;
      for (uint8_t i = 0; i < count; ++i) ops[i].request = request;
      request->ops = ops;
    }
    free_.pop_back();
    request->state = Request::State::kActive;
    request->count = count;
    request->remaining = count;
    request->error = abi::kSuccess;
    request->postedNs = 0;  // stamped by the first stall check: no clock read per message
    request->heldRegistration = nullptr;
    return request;
  }
  void release(Request* request) {
    if (ops_ != nullptr) {
      ops_->release(request->ops);
      request->ops = nullptr;
    }
    request->count = 0;
    request->state = Request::State::kFree;
    free_.push_back(request);
  }
  bool owns(const Request* request) const { return request->pool == this; }
  size_t capacity() const { return capacity_; }
  size_t inlineOps() const { return inlineOps_; }
  size_t inUse() const { return created_ - free_.size(); }
  template <typename Visit>
  void forEach(Visit&& visit) {
    for (Chunk& chunk : chunks_) {
      for (size_t i = 0; i < chunk.count; ++i) {
        visit(*reinterpret_cast<Request*>(chunk.memory.get() + i * stride_));
      }
    }
  }

 private:
  // A comm's first chunk is small (most comms have a few requests in flight), later ones larger.
  static constexpr size_t kFirstChunk = 8;
  static constexpr size_t kChunk = 32;
  struct Chunk {
    std::unique_ptr<uint8_t[]> memory;
    size_t count;
  };
  bool grow();

  DataComm* comm_;
  size_t capacity_;
  OpPool* ops_;
  size_t inlineOps_;
  size_t stride_;  // a request, then its inline operation where it has one
  std::vector<Chunk> chunks_;
  size_t created_ = 0;
  std::vector<Request*> free_;
};

}  // namespace nnf::core
