#include "protocol/rdma_send_close.h"

#include "core/device.h"
#include "core/wire.h"
#include "log/log.h"

namespace nnf::protocol::rdma {

SenderClose::SenderClose(core::SendComm& comm, ArenaSlot& ring) : comm_(comm), ring_(ring) {
  answer_.owner = &comm;
}

void SenderClose::onClose(int writesPending) {
  linger_.start(comm_);
  state_.onClose(/*connected=*/comm_.remoteId() != 0);
  answerIfIdle(writesPending);
}

void SenderClose::onPeerClosed(int writesPending) {
  state_.onPeerClosed();
  answerIfIdle(writesPending);
}

void SenderClose::answerIfIdle(int writesPending) {
  if (!answerOwed()) return;
  bool idle = comm_.callerOpsInFlight() == 0 && !answerPending() && writesPending == 0;
  if (!state_.answerNow(idle)) return;
  // Sent after our last write completed; the receiver's close waits for it (or for our death).
  uint8_t* buffer = ring_->data + kNoticeOffset;
  static_assert(sizeof(core::wire::ControlHeader) + sizeof(ClosedAck) <= kNoticeBytes);
  comm_.device().controlChannel().send(answer_, buffer, *ring_, comm_,
                                       core::wire::ControlKind::kClosedAck, &written_,
                                       sizeof(written_));
  // The app may be waiting on another comm: nothing else would progress this device, and on a
  // manual-progress provider (tcp) the ack would sit in its queue until the peer's close gave up;
  // the device's keeper progresses it (woken by the post).
}

void SenderClose::answerAgain(int error) {
  comm_.device().controlChannel().sendAgain(answer_, *ring_, comm_, error);
}

bool SenderClose::ringExposed() {
  // The receiver may still write descriptors into the ring until it says it closed; a dead one
  // writes nothing more.
  if (!comm_.closed() || state_.receiverDone() || comm_.peerFailed()) return false;
  bool setAside = false;
  if (state_.ringExposed(linger_.holding(), &setAside)) return true;
  if (!setAside) return false;
  // A live receiver that neither closed nor answered within the close bound: the comm goes, its
  // ring never returns to the arena (16 KiB), so that no new comm reads the late descriptors.
  ring_.leak();
  NNF_INFO(abi::kLogSubsysNet,
           "comm %u: the receiver did not close within NCCL_FABRIC_CLOSE_TIMEOUT_MS; its "
           "descriptor ring is set aside rather than reused",
           comm_.id());
  return false;
}

}  // namespace nnf::protocol::rdma
