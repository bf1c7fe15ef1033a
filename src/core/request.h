// Requests handed to NCCL by isend / irecv / iflush, and the fixed pool they come from. A
// request completes only when every one of its operations has completed, in whatever order the
// provider reports them (SRD does not order completions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "abi/nccl_abi.h"
#include "core/operation.h"

namespace nnf::core {

class DataComm;

struct Request {
  static constexpr uint32_t kMagic = 0x5251464eu;  // "NFQR"
  // kAbandoned: failed and already reported to NCCL, but some operations are still with the
  // provider; it returns to the pool when the last one completes.
  enum class State : uint8_t { kFree, kActive, kDone, kFailed, kAbandoned };

  uint32_t magic = kMagic;
  State state = State::kFree;
  uint8_t count = 0;      // operations in this request
  uint8_t remaining = 0;  // operations not completed yet
  abi::Result error = abi::kSuccess;
  uint64_t postedNs = 0;  // steady clock of the first stall check (0: not checked yet)
  DataComm* comm = nullptr;
  Operation* ops = nullptr;  // `capacity` operations owned by the pool
  size_t* sizes = nullptr;   // bytes moved per operation
};

class RequestPool {
 public:
  // `requests` requests of up to `opsPerRequest` operations each, allocated here once.
  RequestPool(DataComm* comm, size_t requests, size_t opsPerRequest);
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // nullptr when all requests are in use (NCCL then retries).
  Request* acquire(uint8_t count) {
    if (free_.empty()) return nullptr;
    Request* request = free_.back();
    free_.pop_back();
    request->state = Request::State::kActive;
    request->count = count;
    request->remaining = count;
    request->error = abi::kSuccess;
    request->postedNs = 0;  // stamped by the first stall check: no clock read per message
    return request;
  }
  void release(Request* request) {
    request->state = Request::State::kFree;
    free_.push_back(request);
  }
  bool owns(const Request* request) const {
    return request >= requests_.data() && request < requests_.data() + requests_.size();
  }
  size_t capacity() const { return requests_.size(); }
  size_t inUse() const { return requests_.size() - free_.size(); }
  std::vector<Request>& all() { return requests_; }

 private:
  std::vector<Request> requests_;
  std::vector<Operation> ops_;
  std::vector<size_t> sizes_;
  std::vector<Request*> free_;
};

}  // namespace nnf::core
