#include "rma/context.h"

#include <new>

namespace nnf::rma {

Context::Context(Group& group, int streams) : group_(group), streams_(streams) {
  ref_.kind = HandleKind::kContext;
  ref_.object = this;
}

Context::~Context() {
  ref_.magic = HandleRef::kMagicDead;
  forEach([](Request& request) { request.magic = 0; });
}

Request* Context::acquire(RequestKind kind, uint32_t peer) {
  if (free_.empty()) {
    // NCCL keeps up to 32 x maxRecvs requests in flight per peer: the pool grows to what it
    // uses, a chunk at a time, and then stays.
    std::unique_ptr<Request[]> chunk(new (std::nothrow) Request[kChunk]);
    if (!chunk) return nullptr;
    free_.reserve(free_.size() + kChunk);
    for (size_t i = kChunk; i > 0; --i) {
      Request& request = chunk[i - 1];
      request.ctx = this;
      for (OpSlot& slot : request.ops) slot.request = &request;
      free_.push_back(&request);
    }
    chunks_.push_back(std::move(chunk));
  }
  Request* request = free_.back();
  free_.pop_back();
  ++inUse_;
  request->state = Request::State::kActive;
  request->kind = kind;
  request->peer = peer;
  request->shares = 0;
  request->pending = 0;
  request->error = abi::kSuccess;
  request->finished = false;
  request->startedNs = 0;
  request->held[0] = request->held[1] = nullptr;
  request->nextWaiting = nullptr;
  request->next = nullptr;
  request->prev = tail_;
  if (tail_ != nullptr) {
    tail_->next = request;
  } else {
    head_ = request;
  }
  tail_ = request;
  return request;
}

void Context::unlink(Request& request) {
  if (request.prev == nullptr && head_ != &request) return;  // not linked
  if (request.prev != nullptr) {
    request.prev->next = request.next;
  } else {
    head_ = request.next;
  }
  if (request.next != nullptr) {
    request.next->prev = request.prev;
  } else {
    tail_ = request.prev;
  }
  request.prev = request.next = nullptr;
}

void Context::release(Request& request) {
  unlink(request);
  request.state = Request::State::kFree;
  --inUse_;
  free_.push_back(&request);
}

}  // namespace nnf::rma
