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
  if (state_.onClose(/*connected=*/comm_.remoteId() != 0, buffersDescribed, writesInFlight)) {
    sendNotice();
  }
}

// Tells the sender that this receive comm closed: it fails what waits for us, answers once its
// writes have ended, and may reuse its ring (no write of ours into it is in flight any more).
void ReceiverClose::sendNotice() {
  uint8_t* buffer = staging_->data + kNoticeOffset;
  // A failure is the device's to log: the peer may be gone already, which is what it would hear.
  comm_.device().controlChannel().send(notice_, buffer, *staging_, comm_,
                                       core::wire::ControlKind::kClosed, nullptr, 0);
}

bool ReceiverClose::onNoticeDone(const core::Operation& op, int error) {
  if (&op != &notice_) return false;
  if (error != 0 && comm_.device().controlChannel().sendAgain(notice_, *staging_, comm_, error)) {
    return true;  // its rail broke: it goes again on another
  }
  if (error != 0) state_.onNoticeFailed();
  return true;
}

void ReceiverClose::onAnswer(const uint8_t* data, size_t length) {
  if (length >= sizeof(ClosedAck)) {
    ClosedAck written;
    memcpy(&written, data, sizeof(written));
    state_.onAnswer(&written);
    return;
  }
  NNF_INFO(abi::kLogSubsysNet, "comm %u: the sender's close answer carries no write counts",
           comm_.id());
  state_.onAnswer(nullptr);
}

}  // namespace nnf::protocol::rdma
