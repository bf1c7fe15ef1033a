// The receiver's side of an rdma comm's close (protocol/rdma.h, docs/architecture.md "Closing"):
// the close notice (kClosed) that tells the sender to write nothing more, sent once no write of
// ours into its ring is in flight, and the wait for the sender's writes still on their way: its
// answer (kClosedAck) counts them per rail, and the close waits until as many have landed. The
// states are RecvCloseState's; this object sends the notice and reads the answer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/operation.h"
#include "core/recv_comm.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_linger.h"
#include "protocol/rdma_recv_close_state.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

class ReceiverClose {
 public:
  ReceiverClose(core::RecvComm& comm, const ArenaSlot& staging);
  ReceiverClose(const ReceiverClose&) = delete;
  ReceiverClose& operator=(const ReceiverClose&) = delete;

  // A write of the sender's landed on `rail` (whatever it carried): a close waiting for it may end.
  void onLanded(size_t rail) { state_.onLanded(rail); }
  // The comm closes. `buffersDescribed`: the sender may write into buffers of NCCL's;
  // `writesInFlight`: writes of ours into the sender's ring are with the provider (the notice
  // follows the last of them).
  void onClose(bool buffersDescribed, bool writesInFlight);
  // One of our writes into the sender's ring ended: the notice owed goes once `writesInFlight()`
  // says none is left (asked only while one is owed).
  template <typename WritesInFlight>
  void onOwnWriteEnded(WritesInFlight&& writesInFlight) {
    if (state_.notice() == CloseNotice::kOwed && state_.onOwnWriteEnded(writesInFlight())) {
      sendNotice();
    }
  }
  // The notice ended: true when `op` was it.
  bool onNoticeDone(const core::Operation& op, int error);
  // The sender's answer: it writes nothing more, and made this many writes per rail.
  void onAnswer(const uint8_t* data, size_t length);
  // Writes the sender may still make into NCCL's buffers (the close waits for them).
  int peerWritesPending() const { return state_.waiting() ? 1 : 0; }
  // Whether the sender answered and every write it counted has landed.
  bool senderFinished() const { return state_.senderFinished(); }
  // Whether the close bound for a sender that never answers is still ahead.
  bool lingering() const { return linger_.holding(); }
  core::Operation& notice() { return notice_; }

 private:
  void sendNotice();

  core::RecvComm& comm_;
  const ArenaSlot& staging_;  // the notice's buffer (kNoticeOffset)
  RecvCloseState state_;
  core::Operation notice_;
  Linger linger_;
};

}  // namespace nnf::protocol::rdma
