#include "core/silence_watch.h"

namespace nnf::core {

SilenceWatch::Findings SilenceWatch::look(uint64_t nowNs, uint32_t busy, size_t rails,
                                          uint64_t boundNs) {
  uint64_t total = 0;
  for (size_t r = 0; r < rails; ++r) total += landed_[r];
  const bool first = !looked_;
  looked_ = true;
  // Stuck: a write in flight and none completed since the last look.
  uint32_t stuck = 0;
  for (size_t r = 0; r < rails; ++r) {
    const uint32_t bit = 1u << r;
    const bool progressed = landed_[r] != seen_[r];
    if (first || progressed || (busy & bit) == 0) {
      quietSinceNs_[r] = nowNs;
      othersBefore_[r] = first ? total - landed_[r] : seenTotal_ - seen_[r];
    } else {
      // Idle at the last look (which may be long ago: the device stops looking while nothing is
      // in flight): what is stuck was posted since, and its quiet time counts from this look.
      if ((lastBusy_ & bit) == 0) quietSinceNs_[r] = nowNs;
      stuck |= bit;
    }
    seen_[r] = landed_[r];
  }
  lastBusy_ = busy;
  Findings findings;
  for (size_t r = 0; r < rails; ++r) {
    const uint32_t bit = 1u << r;
    // Singled out: every other rail completes, or carries nothing. Several rails stuck at once
    // look like a slow peer (or more than one broken path), which is not this rule's to judge.
    if ((stuck & bit) == 0 || (stuck & ~bit) != 0) continue;
    if (total - landed_[r] <= othersBefore_[r]) {
      findings.unwitnessed |= bit;
    } else if (nowNs - quietSinceNs_[r] >= boundNs) {
      findings.silent |= bit;
      quietSinceNs_[r] = nowNs;
      othersBefore_[r] = total - landed_[r];
    }
  }
  seenTotal_ = total;
  return findings;
}

}  // namespace nnf::core
