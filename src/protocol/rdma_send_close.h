// The sender's side of an rdma comm's close (protocol/rdma.h): the answer that tells the
// receiver it writes nothing more (kClosedAck, with its write counts per rail), and the
// descriptor ring the receiver may write into until it said it closed (kClosed).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/operation.h"
#include "core/send_comm.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_linger.h"
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
  // The receiver said it closed (or it is gone): it writes no more descriptors and reads nothing.
  bool receiverDone() const { return receiverDone_; }

  // Our comm closes: the answer goes unasked once our last write has ended (`writesPending`:
  // the comm's writes besides NCCL's requests).
  void onClose(int writesPending);
  // The receiver's kClosed: it closed; the answer goes once our last write has ended.
  void onPeerClosed(int writesPending);
  // A write of ours ended: an answer owed may go now.
  void onWriteDone(int writesPending);

  bool isAnswer(const core::Operation& op) const { return &op == &answer_; }
  bool answerPending() const { return answer_.inFlight || answer_.queued; }
  // Whether the ring must stay out of the arena (closed, the receiver may still write into it);
  // past the close bound the ring is set aside for good instead.
  bool ringExposed();

 private:
  void answerIfIdle(int writesPending);

  core::SendComm& comm_;
  ArenaSlot& ring_;
  core::Operation answer_;
  ClosedAck written_{};      // writes with immediate data completed per rail (the answer says)
  bool answerOwed_ = false;  // the receiver closed, or we did: answer once nothing is in flight
  // The receiver said (kClosed) that it writes no more descriptors into the ring. Until then a
  // closed comm keeps its ring out of the arena: a new comm reusing it would read the old
  // receiver's late descriptors and write into its freed buffers.
  bool receiverDone_ = false;
  Linger linger_;
};

}  // namespace nnf::protocol::rdma
