// The life of the receiver's descriptor slots (docs/architecture.md, "The receive slot"): one a
// grouped receive in flight. A slot serves a receive from its irecv until every buffer of it
// ended, and is reused only once the sender can no longer read its previous descriptors: the
// sender's voids for buffers filled eagerly have come, and (checked by RecvSlots::freeSlot, from
// the operation) the write that put its descriptors into the sender's ring has ended.
#pragma once

#include <cstdint>

#include "protocol/rdma_slot_progress.h"
#include "protocol/rdma_wire.h"
#include "protocol/state_machine.h"

namespace nnf::protocol::rdma {

enum class SlotState : uint8_t {
  kFree,           // serves no receive
  kUndescribed,    // serves a small receive, its descriptors staged only: its message comes eagerly
  kDescribed,      // serves a receive whose descriptors were written into the sender's ring
  kAwaitingVoids,  // its receive ended; voids are owed for buffers an eager message filled
};
constexpr size_t kSlotStates = 4;

inline const char* stateName(SlotState state) {
  switch (state) {
    case SlotState::kFree:
      return "free";
    case SlotState::kUndescribed:
      return "undescribed";
    case SlotState::kDescribed:
      return "described";
    case SlotState::kAwaitingVoids:
      return "awaiting voids";
  }
  return "?";
}

class SlotLifecycle {
 public:
  SlotState state(uint32_t slot) const { return states_[slot]; }
  // Bit s: slot s serves a receive or awaits its voids (not free).
  uint32_t busy() const { return busy_; }
  // Bit s: slot s is undescribed (a scan: for the rare paths that need it).
  uint32_t undescribed() const {
    uint32_t set = 0;
    for (uint32_t busy = busy_; busy != 0; busy &= busy - 1) {
      auto slot = static_cast<uint32_t>(__builtin_ctz(busy));
      if (states_[slot] == SlotState::kUndescribed) set |= 1u << slot;
    }
    return set;
  }

  // A receive takes free `slot`: its descriptors are written now, or stay staged (its message
  // comes eagerly; it is described late if none came).
  void onTake(uint32_t slot, bool describe) {
    checkEvent(kMachine, "take", state(slot), anyOf({SlotState::kFree}));
    to(slot, describe ? SlotState::kDescribed : SlotState::kUndescribed);
  }
  // An undescribed receive is described late.
  void onDescribeLate(uint32_t slot) {
    checkEvent(kMachine, "late description", state(slot), anyOf({SlotState::kUndescribed}));
    to(slot, SlotState::kDescribed);
  }
  // Every buffer of the slot's receive ended (`buffers`: the slot's). While a buffer an eager
  // message filled awaits its void, the sender has not read the slot's descriptors yet: the
  // slot waits for the voids. True when the slot is free.
  bool onReceiveEnded(uint32_t slot, const SlotProgress& buffers) {
    checkEvent(kMachine, "receive ended", state(slot),
               anyOf({SlotState::kUndescribed, SlotState::kDescribed}));
    bool voidsOwed = buffers.voidsOwed();
    to(slot, voidsOwed ? SlotState::kAwaitingVoids : SlotState::kFree);
    return !voidsOwed;
  }
  // A void landed for a buffer of `slot` (counted in `buffers` already): true when it was the
  // last one an ended receive's slot awaited, which is then free.
  bool onVoidLanded(uint32_t slot, const SlotProgress& buffers) {
    if (state(slot) != SlotState::kAwaitingVoids || buffers.voidsOwed()) return false;
    to(slot, SlotState::kFree);
    return true;
  }
  // The receive failed or was given up, or its descriptors could not be written: no more data
  // comes for it, the slot is free at once.
  void onReleased(uint32_t slot) {
    checkEvent(kMachine, "release", state(slot),
               anyOf({SlotState::kUndescribed, SlotState::kDescribed, SlotState::kAwaitingVoids}));
    to(slot, SlotState::kFree);
  }

 private:
  static constexpr const char* kMachine = "receive slot";
  static constexpr Transitions<SlotState, kSlotStates> kAllowed{
      {SlotState::kFree, SlotState::kUndescribed},
      {SlotState::kFree, SlotState::kDescribed},
      {SlotState::kUndescribed, SlotState::kDescribed},
      {SlotState::kUndescribed, SlotState::kFree},
      {SlotState::kDescribed, SlotState::kAwaitingVoids},
      {SlotState::kDescribed, SlotState::kFree},
      {SlotState::kAwaitingVoids, SlotState::kFree},
  };
  // The one transition function: the state, and the set of busy slots kept beside it for the
  // data path's scan for a free one.
  void to(uint32_t slot, SlotState next) {
    NNF_ASSERT(slot < kSlots, "receive slot %u out of range", slot);
    checkTransition(kAllowed, kMachine, states_[slot], next);
    states_[slot] = next;
    uint32_t bit = 1u << slot;
    busy_ = next == SlotState::kFree ? busy_ & ~bit : busy_ | bit;
  }

  SlotState states_[kSlots] = {};
  uint32_t busy_ = 0;
  static_assert(kSlots == 32, "one bit per slot");
};

}  // namespace nnf::protocol::rdma
