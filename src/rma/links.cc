#include "rma/links.h"

#include <cassert>

namespace nnf::rma {

void InboundLink::transition(Slot& slot, State to) {
#ifndef NDEBUG
  // kFree -> kLanding -> kWaiting -> kApplied -> kFree; the entry may come first (no kLanding).
  bool allowed = (slot.state == State::kFree && (to == State::kLanding || to == State::kWaiting)) ||
                 (slot.state == State::kLanding && to == State::kWaiting) ||
                 (slot.state == State::kWaiting && to == State::kApplied) ||
                 (slot.state == State::kApplied && to == State::kFree);
  assert(allowed && "InboundLink: slot transition out of order");
#endif
  slot.state = to;
}

void InboundLink::onPlain() {
  ++plainLanded_;
  advance();  // a strong entry at the front may have waited for this segment
}

bool InboundLink::onSegment(uint32_t seq8) {
  Slot& slot = slots_[seq8 % kSlots];
  if (slot.state == State::kApplied) return false;  // its put is complete: no segment is owed
  if (slot.state == State::kFree) transition(slot, State::kLanding);
  if (slot.state == State::kWaiting && slot.landed >= slot.entry.segments) return false;
  ++slot.landed;
  if (complete(slot)) tryApply(slot);
  advance();
  return true;
}

bool InboundLink::onEntry(uint32_t seq8, const SignalEntry& entry, const uint8_t* payload) {
  // The entry's own 16-bit sequence names the put exactly; it must lie in the window of
  // kSlots the source may have unfreed, and agree with the immediate's 8 bits.
  uint32_t seq = freed_ + ((uint32_t{entry.seq} - freed_) & 0xffffu);
  if (seq - freed_ >= kSlots || (seq & 0xffu) != (seq8 & 0xffu)) return false;
  Slot& slot = slots_[seq % kSlots];
  if (slot.state != State::kFree && slot.state != State::kLanding) return false;
  if (slot.landed > entry.segments) return false;
  transition(slot, State::kWaiting);
  slot.seq = seq;
  slot.entry = entry;
  slot.payload = payload;
  slot.refused = false;
  if (complete(slot)) tryApply(slot);
  advance();
  return true;
}

bool InboundLink::tryApply(Slot& slot) {
  bool strong = (slot.entry.flags & kEntryStrong) != 0;
  if (strong) {
    // Every older entry applied (it is the front) and the plain segments before it landed.
    if (slot.seq != freed_) return false;
    if (static_cast<int32_t>(plainLanded_ - slot.entry.plainBefore) < 0) return false;
  }
  if (!actions_->apply(peer_, slot.entry, slot.payload)) {
    if (!slot.refused) {
      slot.refused = true;
      ++blocked_;
    }
    return false;
  }
  if (slot.refused) {
    slot.refused = false;
    --blocked_;
  }
  transition(slot, State::kApplied);
  return true;
}

void InboundLink::advance() {
  for (;;) {
    Slot& front = slots_[freed_ % kSlots];
    if (front.state == State::kApplied && front.seq == freed_) {
      transition(front, State::kFree);
      front.landed = 0;
      front.payload = nullptr;
      ++freed_;
      continue;
    }
    // A strong entry waits at the front for the older ones and its plain segments.
    if (complete(front) && front.seq == freed_ && tryApply(front)) continue;
    break;
  }
  if (freed_ - reported_ >= kCreditBatch) {
    reported_ = freed_;
    actions_->credit(peer_, freed_);
  }
}

void InboundLink::retry() {
  if (blocked_ == 0) return;
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot& slot = slots_[(freed_ + i) % kSlots];
    if (slot.refused && complete(slot)) tryApply(slot);
  }
  advance();
}

}  // namespace nnf::rma
