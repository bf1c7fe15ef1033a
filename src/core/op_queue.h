// Operations waiting to be posted, first in first out: the provider said -FI_EAGAIN, or the
// device's share of the provider's queue is in use. Intrusive and doubly linked, so that
// closing a comm takes its waiting operations out in constant time.
#pragma once

#include <cstddef>

#include "core/operation.h"

namespace nnf::core {

class OpQueue {
 public:
  bool empty() const { return head_ == nullptr; }
  size_t size() const { return size_; }
  Operation* front() const { return head_; }

  void push(Operation& op) {
    op.queued = true;
    op.nextQueued = nullptr;
    op.prevQueued = tail_;
    if (tail_ != nullptr) {
      tail_->nextQueued = &op;
    } else {
      head_ = &op;
    }
    tail_ = &op;
    ++size_;
  }

  void remove(Operation& op) {
    if (!op.queued) return;
    if (op.prevQueued != nullptr) {
      op.prevQueued->nextQueued = op.nextQueued;
    } else {
      head_ = op.nextQueued;
    }
    if (op.nextQueued != nullptr) {
      op.nextQueued->prevQueued = op.prevQueued;
    } else {
      tail_ = op.prevQueued;
    }
    op.queued = false;
    op.nextQueued = nullptr;
    op.prevQueued = nullptr;
    --size_;
  }

 private:
  Operation* head_ = nullptr;
  Operation* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nnf::core
