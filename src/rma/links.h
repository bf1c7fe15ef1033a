// The two ends of one link (a source rank and its target in a group), as pure logic so that a
// reordering fake transport can prove them (tests/unit/rma_links_test.cc): SRD delivers the
// segments, signal entries and credits of a link in any order.
//
// Source (OutboundLink): signaled puts are numbered per link; the n-th takes ring slot n mod
// kSlots at the target, and may be sent only while fewer than kSlots are unfreed there (the
// target returns credits). Plain puts need no slot: the source only counts their segments, so
// that a strong signal can tell the target how many must have landed before it.
//
// Target (InboundLink): a signaled put's entry and its data segments land in any order; the put
// is complete when the entry and all the segments it announces are there. Then:
//   weak   its signal is applied at once;
//   strong it waits until every older signaled put of the link is applied and every plain
//          segment sent before it has landed (the order NCCL's GIN proxy asks of a strong signal).
// Slots are freed in sequence order (an entry applied out of order waits for the older ones) and
// the count freed goes back to the source every kCreditBatch entries.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rma/wire.h"

namespace nnf::rma {

class OutboundLink {
 public:
  bool slotFree() const { return nextSeq_ - credited_ < kSlots; }
  // Takes the next sequence number (slotFree() must hold).
  uint32_t takeSeq() { return nextSeq_++; }
  uint32_t nextSeq() const { return nextSeq_; }
  // Plain segments sent so far (modulo 2^32); `segments` more go now.
  uint32_t plainSent() const { return plainSent_; }
  void notePlain(uint32_t segments) { plainSent_ += segments; }
  // A credit write said `count` entries were freed (modulo 256). Overtaken ones are ignored:
  // they are behind. True when slots became free.
  bool onCredit(uint32_t count) {
    uint32_t ahead = (count - credited_) & 0xffu;
    if (ahead == 0 || ahead > nextSeq_ - credited_) return false;
    credited_ += ahead;
    return true;
  }
  uint32_t unfreed() const { return nextSeq_ - credited_; }

 private:
  uint32_t nextSeq_ = 0;
  uint32_t credited_ = 0;
  uint32_t plainSent_ = 0;
};

class InboundLink {
 public:
  // What the target does for the link (the group; a fake in the unit test). Device lock held.
  class Actions {
   public:
    // Applies a complete entry (inline bytes, then the signal); false when it must wait (a
    // strong signal into GPU memory behind earlier ones still being written): retry() again.
    virtual bool apply(uint32_t peer, const SignalEntry& entry, const uint8_t* payload) = 0;
    // The source may reuse the slots of the first `freed` entries (modulo 256).
    virtual void credit(uint32_t peer, uint32_t freed) = 0;

   protected:
    ~Actions() = default;
  };

  // Slot states, in the order a put moves through them.
  enum class State : uint8_t {
    kFree,     // nothing of the slot's put has arrived
    kLanding,  // segments arrived, the entry not yet
    kWaiting,  // the entry arrived; segments, order or the signal's memory hold it back
    kApplied,  // applied, waiting for older entries before the slot is freed
  };

  void init(Actions* actions, uint32_t peer) {
    actions_ = actions;
    peer_ = peer;
  }
  // A plain put's segment landed.
  void onPlain();
  // A signaled put's segment landed; `seq8` is its sequence number modulo 256. False: the
  // segment names a slot the protocol cannot have in flight (the link is broken).
  bool onSegment(uint32_t seq8);
  // The signal entry of `seq8` landed: `entry` is its copy, `payload` its inline bytes (stable
  // until the slot is freed). False as for onSegment.
  bool onEntry(uint32_t seq8, const SignalEntry& entry, const uint8_t* payload);
  // Tries again what apply() refused.
  void retry();
  bool blocked() const { return blocked_ > 0; }

  uint32_t freed() const { return freed_; }
  uint32_t plainLanded() const { return plainLanded_; }
  State state(uint32_t slot) const { return slots_[slot % kSlots].state; }

 private:
  struct Slot {
    State state = State::kFree;
    bool refused = false;   // apply() said wait
    uint16_t landed = 0;    // segments arrived
    uint32_t seq = 0;       // the full sequence number, once the entry is here
    SignalEntry entry{};    // header only: the payload stays in the ring
    const uint8_t* payload = nullptr;
  };
  void transition(Slot& slot, State to);
  bool complete(const Slot& slot) const {
    return slot.state == State::kWaiting && slot.landed == slot.entry.segments;
  }
  // Applies `slot` if nothing holds it back; true when it was.
  bool tryApply(Slot& slot);
  // Frees the applied entries at the front and applies the strong one that waited for them.
  void advance();

  Actions* actions_ = nullptr;
  uint32_t peer_ = 0;
  Slot slots_[kSlots];
  uint32_t freed_ = 0;        // entries freed, in sequence order (the front is freed_)
  uint32_t reported_ = 0;     // credits sent
  uint32_t plainLanded_ = 0;  // plain segments landed
  uint32_t blocked_ = 0;      // complete entries apply() refused
};

}  // namespace nnf::rma
