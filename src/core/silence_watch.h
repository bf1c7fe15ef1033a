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
// complete a write (or carry none): whatever is stuck on it now was posted before that look, so
// the witnesses are the other rails' completions since the look before it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/region.h"

namespace nnf::core {

class SilenceWatch {
 public:
  // A write of the comm completed on `rail`.
  void landed(size_t rail) { ++landed_[rail]; }
  // A look at `nowNs`: bit r of `busy` says a write of the comm is with the provider on rail r
  // (of `rails`). Returns the rails found silent for `boundNs` (each is quiet again from now, so
  // that it is named once a bound). The first look, and one after a look that saw nothing in
  // flight (the device may have stopped looking meanwhile), only start over.
  uint32_t look(uint64_t nowNs, uint32_t busy, size_t rails, uint64_t boundNs);

 private:
  uint64_t landed_[memory::kMaxRails] = {};
  uint64_t seen_[memory::kMaxRails] = {};  // landed_ at the last look
  uint64_t seenTotal_ = 0;                 // their sum
  // When rail r was last seen completing a write or carrying none, and the other rails'
  // completions at the look before that (what a witness must exceed).
  uint64_t quietSinceNs_[memory::kMaxRails] = {};
  uint64_t othersBefore_[memory::kMaxRails] = {};
  uint32_t lastBusy_ = 0;
  bool looked_ = false;
};

}  // namespace nnf::core
