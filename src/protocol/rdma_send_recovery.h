// The sender's side of rail recovery (docs/failover.md, step 3; the messages in rdma_wire.h). A
// data write that failed on a rail whose path broke (the device has taken the rail down) is not
// the request's failure while another rail of the comm is up: the share it belonged to is in
// doubt (the write may have landed, its acknowledgement lost). The sender asks the receiver
// about it, one question at a time, and on the answer either writes the share again, whole, on
// a rail that is up, or (the buffer ended: the original landed) counts it done. A share written
// again that fails again is asked about again. Where another share of the message is on the same
// rail (one written again onto the rail of another: two rails failing under one striped
// message), the receiver forgets both with the rail's count, so the question waits until neither
// moves any more there, and both go again (docs/failover.md, "Failing twice").
//
// Why nothing is counted twice: the receiver forgets what landed of that rail's share before it
// answers, and ignores that rail for the buffer from then on, so only the share written again
// counts; its slot cannot serve another group meanwhile (the buffer waits for the share), and
// the question names the buffer by the (tag, sequence number) of its descriptor, so a question
// about a buffer that ended is never taken for a later group's. What it relies on from efa: a
// write that completed with an error lands nothing after that error (only a real NIC can show
// it; docs/failover.md, "The fence").
//
// An eager message that failed so is asked about by its bounce entry and its generation there
// (kEagerQuery): the receiver says whether the entry took it; if not, it is written again, whole,
// into the same entry on a rail that is up. Should the first write land after all (it was in the
// receiver's queue, unread, when the question came), the receiver takes one of the two: the
// immediate carries the generation, and the entry takes each generation once. Until the message
// is settled no eager message goes (the entry is not written again under it). One written again
// that fails again (its new rail broke too) is asked about again, the same way.
//
// A void that failed so (the answer to a descriptor whose message went eagerly) is asked about by
// its slot, buffer and the (tag, sequence number) the descriptor said (kVoidQuery): the receiver
// says whether the buffer still waits for it, and ignores that rail's voids for the buffer from
// then on; if it waits, the void is written again on a rail that is up. Its slot cannot serve
// another group meanwhile (it waits for the void), so the ring entry still names the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/operation.h"
#include "core/send_comm.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_device.h"
#include "protocol/rdma_eager_hold.h"
#include "protocol/rdma_wire.h"
#include "protocol/state_machine.h"

namespace nnf::protocol::rdma {

enum class ShareDoubt : uint8_t {
  kUnresolved,  // failed; waits for its turn to be asked about
  kAsked,       // the question is with the receiver
};
constexpr size_t kShareDoubts = 2;

inline const char* stateName(ShareDoubt state) {
  return state == ShareDoubt::kUnresolved ? "unresolved" : "asked";
}

class SendRecovery {
 public:
  // `hold`: the eager sender's, held while an eager message is in doubt or written again.
  SendRecovery(core::SendComm& comm, const RdmaDevice& rdma, const ArenaSlot& ring,
               EagerHold& hold);
  SendRecovery(const SendRecovery&) = delete;
  SendRecovery& operator=(const SendRecovery&) = delete;

  // `op`, a segment of a request's data write, failed with `error`: true when its share is in
  // doubt and taken over (the request stays pending); false when the request fails.
  bool onWriteFailed(core::Operation& op, int error);
  // `op`, one of the eager sender's voids, failed with `error`: true when it is in doubt and
  // taken over (op.segment.resent set until it is written again and ends, or settled); false
  // when it is not to be recovered (then the receiver keeps its slot until the comm closes).
  bool onVoidFailed(core::Operation& op, int error);
  // The receiver's RailAnswer: true when it released the eager entries (EagerHold::release).
  bool onMessage(const uint8_t* data, size_t length);
  // True when `op` was our question (its send ended; a failed send fails the share's request).
  bool onOwnCompletion(core::Operation& op, int error);
  bool questionPending() const { return question_.inFlight || question_.queued; }
  core::Operation& question() { return question_; }
  // The request is given up (it failed, or its comm goes): its shares leave the list.
  void forget(const core::Request& request);
  // A data write of the comm ended (the share in doubt beside it on its rail may be asked about).
  void onWriteEnded();
  // Shares that had ended on a rail and went again with another share of their message asked
  // about there (the receiver forgot the rail's count for the buffer).
  uint64_t writtenBeside() const { return writtenBeside_; }
  // A write of ours that was written again completed: true when it released the eager entries.
  bool onWrittenAgain(const core::Operation& op);

 private:
  struct Doubt {
    core::Operation* op;
    ShareDoubt state;
  };
  static constexpr size_t kCapacity = kSlots * kMaxRails;  // a share per rail, per request
  // Whether the failed `op` is in doubt, and if so its entry in the list.
  bool takeOver(core::Operation& op, const Immediate& imm, int error);
  void askNext();
  // Whether another share of `op`'s message is on its rail and still moving there (posted or
  // queued).
  static bool otherShareMovingOn(const core::Operation& op);
  void resolveRail(core::Request& request, uint8_t rail, bool resend, uint32_t ignored);
  size_t indexOf(const core::Operation& op) const;
  void writeAgain(core::Operation& op, uint32_t avoid);
  void writeEagerAgain(core::Operation& op, size_t rail);
  static bool isEager(const core::Operation& op) { return decode(op.tag).kind == ImmKind::kEager; }
  static bool isVoid(const core::Operation& op) { return decode(op.tag).kind == ImmKind::kVoid; }
  static RecoveryKind answerKind(const core::Operation& op) {
    return isEager(op)  ? RecoveryKind::kEagerAnswer
           : isVoid(op) ? RecoveryKind::kVoidAnswer
                        : RecoveryKind::kAnswer;
  }
  void writeVoidAgain(core::Operation& op, size_t rail);
  // The eager message of `op` (its entry is the immediate's slot) is settled, or failed.
  bool releaseEager(const core::Operation& op) { return hold_.release(decode(op.tag).slot); }
  void settle(core::Operation& op);
  // A share in doubt is given up: its request fails (a void: the receiver keeps its slot).
  void fail(core::Operation& op, int error, const char* why);
  void remove(size_t index);
  static void to(Doubt& doubt, ShareDoubt next) {
    static constexpr Transitions<ShareDoubt, kShareDoubts> kAllowed{
        {ShareDoubt::kUnresolved, ShareDoubt::kAsked},
    };
    checkTransition(kAllowed, "share in doubt", doubt.state, next);
    doubt.state = next;
  }

  core::SendComm& comm_;
  const RdmaDevice& rdma_;
  const ArenaSlot& ring_;  // the descriptors (their keys on every rail), our question's staging
  std::unique_ptr<Doubt[]> doubts_;  // allocated at the first failure
  size_t count_ = 0;
  bool awaitingAnswer_ = false;
  size_t nextRail_ = 0;  // rails that are up take the shares written again in turn
  uint64_t writtenBeside_ = 0;
  EagerHold& hold_;
  core::Operation question_;
};

}  // namespace nnf::protocol::rdma
