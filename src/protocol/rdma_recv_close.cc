#include "protocol/rdma_recv_close.h"

#include <cstring>

#include "core/device.h"
#include "core/wire.h"
#include "log/log.h"

namespace nnf::protocol::rdma {

ReceiverClose::ReceiverClose(core::RecvComm& comm, const ArenaSlot& staging)
    : comm_(comm), staging_(staging) {
  notice_.owner = &comm;
}

void ReceiverClose::onClose(bool buffersDescribed, bool writesInFlight) {
  linger_.start(comm_);
  if (comm_.remoteId() == 0 || notice_.inFlight || notice_.queued) return;
  // Before the sender's answer, its writes may come into any buffer still described; after it,
  // those it counted that have not landed yet are still on their way.
  if (senderDone_) {
    awaitingAck_ = !allLanded();
  } else if (buffersDescribed) {
    awaitingAck_ = true;
  }
  // Descriptor writes cannot be cancelled: the notice follows the last one, so that nothing of
  // ours lands in the sender's ring after it.
  if (writesInFlight) {
    noticeOwed_ = true;
    return;
  }
  sendNotice();
}

// Tells the sender that this receive comm closed: it fails what waits for us, answers once its
// writes have ended, and may reuse its ring (no write of ours into it is in flight any more).
void ReceiverClose::sendNotice() {
  noticeOwed_ = false;
  uint8_t* buffer = staging_->data + kNoticeOffset;
  // A failure is the device's to log: the peer may be gone already, which is what it would hear.
  comm_.device().controlChannel().send(notice_, buffer, staging_->desc, comm_.peer(),
                                       comm_.remoteId(), core::wire::ControlKind::kClosed, nullptr,
                                       0);
}

bool ReceiverClose::onNoticeDone(const core::Operation& op, int error) {
  if (&op != &notice_) return false;
  // A peer that cannot be told is gone: it writes nothing more either.
  if (error != 0) awaitingAck_ = false;
  return true;
}

void ReceiverClose::onAnswer(const uint8_t* data, size_t length) {
  senderDone_ = true;
  if (length >= sizeof(ClosedAck)) {
    memcpy(&announced_, data, sizeof(announced_));
  } else {
    NNF_INFO(abi::kLogSubsysNet, "comm %u: the sender's close answer carries no write counts",
             comm_.id());
    memcpy(announced_.written, landed_, sizeof(landed_));
  }
  awaitingAck_ = awaitingAck_ && !allLanded();
}

}  // namespace nnf::protocol::rdma
