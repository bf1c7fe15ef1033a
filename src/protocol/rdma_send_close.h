// The sender's side of an rdma comm's close (protocol/rdma.h): the answer that tells the
// receiver it writes nothing more (kClosedAck, with its write counts per rail), and the
// descriptor ring the receiver may write into until it said it closed (kClosed). The states are
// SendCloseState's; this object sends the answer and sets the ring aside.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/operation.h"
#include "core/send_comm.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_linger.h"
#include "protocol/rdma_send_close_state.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

class SenderClose {
 public:
  SenderClose(core::SendComm& comm, ArenaSlot& ring);
  SenderClose(const SenderClose&) = delete;
  SenderClose& operator=(const SenderClose&) = delete;

  // A write with immediate data toward the receiver completed (or was injected) on `rail`: the
  // answer counts it, and the receiver's close waits until as many have landed.
  void countWrite(size_t rail) { ++written_.written[rail]; }
  // The receiver said it closed (or is taken as gone): it writes no more descriptors and reads
  // nothing more.
  bool receiverDone() const { return state_.receiverDone(); }
  bool answerOwed() const { return state_.answer() == CloseAnswer::kOwed; }

  // Our comm closes: the answer goes unasked once our last write has ended (`writesPending`:
  // the comm's own writes besides NCCL's requests).
  void onClose(int writesPending);
  // The receiver's kClosed: it closed; the answer goes once our last write has ended.
  void onPeerClosed(int writesPending);
  // The answer owed goes if no write of ours is in flight or queued any more.
  void answerIfIdle(int writesPending);

  bool isAnswer(const core::Operation& op) const { return &op == &answer_; }
  // The answer failed with `error`: sent again on another rail where its own broke.
  void answerAgain(int error);
  bool answerPending() const { return answer_.inFlight || answer_.queued; }
  core::Operation& answer() { return answer_; }
  // Whether the ring must stay out of the arena (closed, the receiver may still write into it);
  // past the close bound the ring is set aside for good instead.
  bool ringExposed();

 private:
  core::SendComm& comm_;
  ArenaSlot& ring_;
  SendCloseState state_;
  core::Operation answer_;
  ClosedAck written_{};  // writes with immediate data completed per rail (the answer says)
  Linger linger_;
};

}  // namespace nnf::protocol::rdma
