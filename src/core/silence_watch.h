// A path that goes silent: its writes neither complete nor fail (issue 27, docs/failover.md
// "Detection, per provider": a NIC reset or a dead link gives efa no error to report, and tcp
// retransmits for minutes). One comm's rule, over its rails: a rail on which a write of the comm
// has been with the provider, with no write of the comm completing on that rail, for the silence
// bound, while writes of the comm on its other rails completed meanwhile and none of those is
// stuck as well, is silent. A peer that is merely slow (descheduled, busy) slows every rail
// alike, and trips nothing.
//
// The device looks at each comm every quarter of the bound (Device::lookForSilentPaths): the comm
// counts its writes' completions per rail (one increment, on comms of several rails only), and a
// look says which rails had a write in flight. A rail is quiet from the last look that saw it
// complete a write, or from the first that saw it busy after one that saw it idle; the witnesses
// are the other rails' completions since the look before the one it went quiet at. Where there
// are none (a stream of one message at a time: nothing else moves while it waits), the comm pings
// its peer over a rail that is not stuck, whose delivery witnesses. A receive comm's writes are
// its own (descriptors, credits, control messages); the sender's writes landing on a rail count
// for that rail (its NIC there is alive).
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/region.h"

namespace nnf::core {

class SilenceWatch {
 public:
  // A write of the comm completed on `rail` (or a message to the peer over it, sent to witness:
  // Findings::unwitnessed). A write settled by the receiver's answer carries no rail
  // (kMaxRails), and counts on none.
  void landed(size_t rail) {
    if (rail < memory::kMaxRails) ++landed_[rail];
  }
  struct Findings {
    uint32_t silent = 0;  // rails found silent (each is quiet again from now: named once a bound)
    // Rails stuck alone with nothing completed elsewhere since they went quiet (a stream of one
    // message at a time waits for the stuck one): a message to the peer over another rail, once
    // delivered, witnesses that the peer and its other NICs are alive.
    uint32_t unwitnessed = 0;
  };
  // A look at `nowNs`: bit r of `busy` says a write of the comm is with the provider on rail r
  // (of `rails`); `boundNs`, the silence bound. The first look only starts; a rail's quiet time
  // counts from the last look that saw it complete a write, or from the first that saw it busy
  // after one that saw it idle (looks may be far apart while nothing is in flight).
  Findings look(uint64_t nowNs, uint32_t busy, size_t rails, uint64_t boundNs);

 private:
  uint64_t landed_[memory::kMaxRails] = {};
  uint64_t seen_[memory::kMaxRails] = {};  // landed_ at the last look
  uint64_t seenTotal_ = 0;                 // their sum
  // When rail r was last seen completing a write or carrying none, and the other rails'
  // completions at the look before that (what a witness must exceed).
  uint64_t quietSinceNs_[memory::kMaxRails] = {};
  uint64_t othersBefore_[memory::kMaxRails] = {};
  uint32_t lastBusy_ = 0;  // `busy` at the last look
  bool looked_ = false;
};

}  // namespace nnf::core
