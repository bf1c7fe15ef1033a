// The sender's close of an rdma comm (docs/architecture.md, "Closing" and "The sender's close"):
// two machines. The answer (kClosedAck): owed once the receiver closed or we did, sent once no
// write of ours is in flight or queued. The ring: the receiver may write descriptors into it
// until it says it closed; a closed comm keeps it out of the arena until then, and past the
// close bound sets it aside for good.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/state_machine.h"

namespace nnf::protocol::rdma {

enum class CloseAnswer : uint8_t {
  kNotOwed,  // neither side closed (or ours closed before the receiver connected)
  kOwed,     // owed: goes once no write of ours is in flight or queued
  kSent,     // handed to the control channel
};
constexpr size_t kCloseAnswers = 3;

enum class RingState : uint8_t {
  kInUse,     // the receiver may still write descriptors into the ring
  kReleased,  // the receiver said it closed (kClosed): it writes nothing more
  kSetAside,  // closed, and the receiver did not close within the close bound: never reused
};
constexpr size_t kRingStates = 3;

inline const char* stateName(CloseAnswer answer) {
  switch (answer) {
    case CloseAnswer::kNotOwed:
      return "not owed";
    case CloseAnswer::kOwed:
      return "owed";
    case CloseAnswer::kSent:
      return "sent";
  }
  return "?";
}

inline const char* stateName(RingState ring) {
  switch (ring) {
    case RingState::kInUse:
      return "in use";
    case RingState::kReleased:
      return "released";
    case RingState::kSetAside:
      return "set aside";
  }
  return "?";
}

class SendCloseState {
 public:
  CloseAnswer answer() const { return answer_; }
  RingState ring() const { return ring_; }
  // The receiver writes no more descriptors and reads nothing more (it closed, or is taken as
  // gone past the close bound).
  bool receiverDone() const { return ring_ != RingState::kInUse; }

  // Our comm closes; `connected`: it has a receiver to tell. The answer goes unasked once our
  // last write has ended: the receiver's close may be waiting for it (our own close notice may
  // never have reached it).
  void onClose(bool connected) {
    if (connected) toAnswer(CloseAnswer::kOwed);
  }
  // The receiver's kClosed: it writes nothing more into the ring, and waits for our answer.
  void onPeerClosed() {
    if (ring_ == RingState::kInUse) toRing(RingState::kReleased);
    toAnswer(CloseAnswer::kOwed);
  }
  // Whether the answer goes now: `idle`, no write of ours is in flight or queued.
  bool answerNow(bool idle) {
    if (answer_ != CloseAnswer::kOwed || !idle) return false;
    toAnswer(CloseAnswer::kSent);
    return true;
  }
  // Closed with the ring in use (`holding`: the close bound is still ahead): whether it must
  // stay out of the arena. Past the bound it is set aside for good (true when that happened now,
  // in *setAside).
  bool ringExposed(bool holding, bool* setAside) {
    *setAside = false;
    if (ring_ != RingState::kInUse) return false;
    if (holding) return true;
    toRing(RingState::kSetAside);
    *setAside = true;
    return false;
  }

 private:
  static constexpr Transitions<CloseAnswer, kCloseAnswers> kAnswers{
      {CloseAnswer::kNotOwed, CloseAnswer::kOwed},
      {CloseAnswer::kOwed, CloseAnswer::kOwed},
      {CloseAnswer::kOwed, CloseAnswer::kSent},
      // Our own close answered first; the receiver's kClosed asks again.
      {CloseAnswer::kSent, CloseAnswer::kOwed},
  };
  static constexpr Transitions<RingState, kRingStates> kRings{
      {RingState::kInUse, RingState::kReleased},
      {RingState::kInUse, RingState::kSetAside},
  };
  void toAnswer(CloseAnswer next) {
    checkTransition(kAnswers, "sender's close answer", answer_, next);
    answer_ = next;
  }
  void toRing(RingState next) {
    checkTransition(kRings, "descriptor ring", ring_, next);
    ring_ = next;
  }

  CloseAnswer answer_ = CloseAnswer::kNotOwed;
  RingState ring_ = RingState::kInUse;
};

}  // namespace nnf::protocol::rdma
