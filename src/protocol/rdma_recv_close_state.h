// The receiver's close of an rdma comm (docs/architecture.md, "Closing" and "The receiver's
// close"): two machines. The wait: what the close waits for before NCCL may free the buffers it
// described (the sender's answer, then its writes still on their way). The notice: kClosed goes
// to the sender once no write of ours into its ring is in flight. Beside them, the sender's
// answer (its write counts per rail) and the writes of it that landed here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "protocol/rdma_wire.h"
#include "protocol/state_machine.h"

namespace nnf::protocol::rdma {

enum class RecvCloseWait : uint8_t {
  kOpen,            // the comm is open
  kAwaitingAnswer,  // closed with buffers described: the sender may still write into them
  kAwaitingWrites,  // closed, answered: writes the sender counted have not all landed yet
  kDone,            // closed: nothing of the sender's can land in NCCL's buffers any more
};
constexpr size_t kRecvCloseWaits = 4;

enum class CloseNotice : uint8_t {
  kUnsent,  // the comm is open, or closed before its sender connected (nobody to tell)
  kOwed,    // closed while writes of ours into the sender's ring were in flight
  kSent,    // handed to the control channel
};
constexpr size_t kCloseNotices = 3;

inline const char* stateName(RecvCloseWait wait) {
  switch (wait) {
    case RecvCloseWait::kOpen:
      return "open";
    case RecvCloseWait::kAwaitingAnswer:
      return "awaiting answer";
    case RecvCloseWait::kAwaitingWrites:
      return "awaiting writes";
    case RecvCloseWait::kDone:
      return "done";
  }
  return "?";
}

inline const char* stateName(CloseNotice notice) {
  switch (notice) {
    case CloseNotice::kUnsent:
      return "unsent";
    case CloseNotice::kOwed:
      return "owed";
    case CloseNotice::kSent:
      return "sent";
  }
  return "?";
}

class RecvCloseState {
 public:
  RecvCloseWait wait() const { return wait_; }
  CloseNotice notice() const { return notice_; }
  // Whether the close waits for writes of the sender's into NCCL's buffers.
  bool waiting() const {
    return wait_ == RecvCloseWait::kAwaitingAnswer || wait_ == RecvCloseWait::kAwaitingWrites;
  }
  // Whether the sender answered and every write it counted has landed.
  bool senderFinished() const { return answered_ && allLanded(); }

  // A write of the sender's landed on `rail` (whatever it carried).
  void onLanded(size_t rail) {
    if (rail < kMaxRails) ++landed_[rail];
    if (wait_ == RecvCloseWait::kAwaitingWrites && allLanded()) toWait(RecvCloseWait::kDone);
  }
  // The comm closes (once). `connected`: it has a sender to tell; `buffersDescribed`: the sender
  // may write into buffers of NCCL's; `writesInFlight`: writes of ours into the sender's ring
  // are with the provider. True when the notice goes now.
  bool onClose(bool connected, bool buffersDescribed, bool writesInFlight) {
    if (!connected) {
      toWait(RecvCloseWait::kDone);
      return false;
    }
    // Before the sender's answer, its writes may come into any buffer still described; after
    // it, those it counted that have not landed yet are still on their way.
    if (answered_) {
      toWait(allLanded() ? RecvCloseWait::kDone : RecvCloseWait::kAwaitingWrites);
    } else {
      toWait(buffersDescribed ? RecvCloseWait::kAwaitingAnswer : RecvCloseWait::kDone);
    }
    // Descriptor writes cannot be cancelled: the notice follows the last one, so that nothing of
    // ours lands in the sender's ring after it.
    toNotice(writesInFlight ? CloseNotice::kOwed : CloseNotice::kSent);
    return !writesInFlight;
  }
  // One of our writes into the sender's ring ended: true when the notice owed goes now.
  bool onOwnWriteEnded(bool writesInFlight) {
    if (notice_ != CloseNotice::kOwed || writesInFlight) return false;
    toNotice(CloseNotice::kSent);
    return true;
  }
  // The notice failed: a sender that cannot be told is gone, and writes nothing more either.
  void onNoticeFailed() {
    if (waiting()) toWait(RecvCloseWait::kDone);
  }
  // The sender's answer (kClosedAck): it writes nothing more, and made as many writes per rail
  // as `written` says (null: it did not say; then as many as landed).
  void onAnswer(const ClosedAck* written) {
    answered_ = true;
    if (written != nullptr) {
      announced_ = *written;
    } else {
      memcpy(announced_.written, landed_, sizeof(landed_));
    }
    if (!waiting()) return;
    toWait(allLanded() ? RecvCloseWait::kDone : RecvCloseWait::kAwaitingWrites);
  }

 private:
  static constexpr Transitions<RecvCloseWait, kRecvCloseWaits> kWaits{
      {RecvCloseWait::kOpen, RecvCloseWait::kAwaitingAnswer},
      {RecvCloseWait::kOpen, RecvCloseWait::kAwaitingWrites},
      {RecvCloseWait::kOpen, RecvCloseWait::kDone},
      {RecvCloseWait::kAwaitingAnswer, RecvCloseWait::kAwaitingWrites},
      {RecvCloseWait::kAwaitingAnswer, RecvCloseWait::kDone},
      {RecvCloseWait::kAwaitingWrites, RecvCloseWait::kAwaitingWrites},
      {RecvCloseWait::kAwaitingWrites, RecvCloseWait::kDone},
  };
  static constexpr Transitions<CloseNotice, kCloseNotices> kNotices{
      {CloseNotice::kUnsent, CloseNotice::kOwed},
      {CloseNotice::kUnsent, CloseNotice::kSent},
      {CloseNotice::kOwed, CloseNotice::kSent},
  };
  void toWait(RecvCloseWait next) {
    checkTransition(kWaits, "receiver's close", wait_, next);
    wait_ = next;
  }
  void toNotice(CloseNotice next) {
    checkTransition(kNotices, "close notice", notice_, next);
    notice_ = next;
  }
  bool allLanded() const {
    for (size_t r = 0; r < kMaxRails; ++r) {
      if (landed_[r] < announced_.written[r]) return false;
    }
    return true;
  }

  RecvCloseWait wait_ = RecvCloseWait::kOpen;
  CloseNotice notice_ = CloseNotice::kUnsent;
  bool answered_ = false;  // the sender's answer came (it closed, or answered our notice)
  // Writes of the sender's that landed here per rail, and how many it said it made: until they
  // match, its writes may still be on their way on some rail.
  uint64_t landed_[kMaxRails] = {};
  ClosedAck announced_{};
};

}  // namespace nnf::protocol::rdma
