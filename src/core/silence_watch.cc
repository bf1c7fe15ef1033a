#include "core/silence_watch.h"

namespace nnf::core {

uint32_t SilenceWatch::look(uint64_t nowNs, uint32_t busy, size_t rails, uint64_t boundNs) {
  uint64_t total = 0;
  for (size_t r = 0; r < rails; ++r) total += landed_[r];
  // After a look that saw nothing in flight the device may have stopped looking for a while: a
  // quiet time measured from then would count time in which nobody watched.
  const bool fresh = !looked_ || lastBusy_ == 0;
  looked_ = true;
  lastBusy_ = busy;
  // Stuck: a write in flight and none completed since the last look.
  uint32_t stuck = 0;
  for (size_t r = 0; r < rails; ++r) {
    const uint32_t bit = 1u << r;
    const bool progressed = landed_[r] != seen_[r];
    if (fresh || progressed || (busy & bit) == 0) {
      quietSinceNs_[r] = nowNs;
      othersBefore_[r] = seenTotal_ - seen_[r];
    } else {
      stuck |= bit;
    }
    seen_[r] = landed_[r];
  }
  uint32_t silent = 0;
  for (size_t r = 0; r < rails; ++r) {
    const uint32_t bit = 1u << r;
    // Singled out: every other rail completes, or carries nothing. Several rails stuck at once
    // look like a slow peer (or more than one broken path), which is not this rule's to judge.
    if ((stuck & bit) == 0 || (stuck & ~bit) != 0) continue;
    if (nowNs - quietSinceNs_[r] >= boundNs && total - landed_[r] > othersBefore_[r]) {
      silent |= bit;
      quietSinceNs_[r] = nowNs;
      othersBefore_[r] = total - landed_[r];
    }
  }
  seenTotal_ = total;
  return silent;
}

}  // namespace nnf::core
