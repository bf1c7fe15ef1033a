#include "protocol/rdma_send_close.h"

#include "core/device.h"
#include "core/wire.h"
#include "log/log.h"

namespace nnf::protocol::rdma {

SenderClose::SenderClose(core::SendComm& comm, ArenaSlot& ring) : comm_(comm), ring_(ring) {
  answer_.owner = &comm;
}

void SenderClose::onClose(int writesPending) {
  // Tell the receiver we write nothing more, once our last write has ended: its close may be
  // waiting for that (our own close notice may never have reached it).
  linger_.start(comm_);
  if (comm_.remoteId() == 0) return;
  answerOwed_ = true;
  answerIfIdle(writesPending);
}

void SenderClose::onPeerClosed(int writesPending) {
  receiverDone_ = true;
  answerOwed_ = true;
  answerIfIdle(writesPending);
}

void SenderClose::onWriteDone(int writesPending) {
  answerIfIdle(writesPending);
}

void SenderClose::answerIfIdle(int writesPending) {
  if (!answerOwed_ || comm_.callerOpsInFlight() > 0 || answerPending() || writesPending > 0) {
    return;
  }
  answerOwed_ = false;
  // Sent after our last write completed; the receiver's close waits for it (or for our death).
  uint8_t* buffer = ring_->data + kNoticeOffset;
  static_assert(sizeof(core::wire::ControlHeader) + sizeof(ClosedAck) <= kNoticeBytes);
  comm_.device().controlChannel().send(answer_, buffer, ring_->desc, comm_.peer(), comm_.remoteId(),
                                       core::wire::ControlKind::kClosedAck, &written_,
                                       sizeof(written_));
}

bool SenderClose::ringExposed() {
  // The receiver may still write descriptors into the ring until it says it closed; a dead one
  // writes nothing more.
  if (!comm_.closed() || receiverDone_ || comm_.peerFailed()) return false;
  if (linger_.holding()) return true;
  // A live receiver that neither closed nor answered within the close bound: the comm goes, its
  // ring never returns to the arena (16 KiB), so that no new comm reads the late descriptors.
  receiverDone_ = true;
  ring_.leak();
  NNF_INFO(abi::kLogSubsysNet,
           "comm %u: the receiver did not close within NCCL_FABRIC_CLOSE_TIMEOUT_MS; its "
           "descriptor ring is set aside rather than reused",
           comm_.id());
  return false;
}

}  // namespace nnf::protocol::rdma
