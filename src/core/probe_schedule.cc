#include "core/probe_schedule.h"

#include <algorithm>

#include "log/assert.h"

namespace nnf::core {
namespace {
// A link that rejoined and failed again within this many probe intervals was not healed: its
// next probe waits twice as long (a path broken beyond our NIC passes our NIC's probe).
constexpr uint64_t kSoonAfterRejoin = 16;
constexpr uint32_t kMaxBackoff = 6;  // at most 64 intervals between probes
}  // namespace

bool ProbeSchedule::markDown(uint64_t nowNs, uint64_t intervalNs) {
  if (state_ != RailState::kUp) return false;
  if (failures_ > 0 && nowNs - upSinceNs_ < kSoonAfterRejoin * intervalNs) {
    backoff_ = std::min(backoff_ + 1, kMaxBackoff);
  } else {
    backoff_ = 0;
  }
  ++failures_;
  to(RailState::kDown);
  nextProbeNs_ = nowNs + (intervalNs << backoff_);
  return true;
}

uint64_t ProbeSchedule::waitFrom(uint64_t nowNs) const {
  switch (state_) {
    case RailState::kUp:
      return UINT64_MAX;
    case RailState::kProbing:
      return 0;
    case RailState::kDown:
      break;
  }
  return nextProbeNs_ > nowNs ? nextProbeNs_ - nowNs : 0;
}

void ProbeSchedule::probeSucceeded(uint64_t nowNs) {
  to(RailState::kUp);
  upSinceNs_ = nowNs;
}

void ProbeSchedule::probeFailed(uint64_t nowNs, uint64_t intervalNs) {
  to(RailState::kDown);
  nextProbeNs_ = nowNs + (intervalNs << backoff_);
}

void ProbeSchedule::to(RailState next) {
  NNF_ASSERT(
      (state_ == RailState::kUp && next == RailState::kDown) ||
          (state_ == RailState::kDown && next == RailState::kProbing) ||
          (state_ == RailState::kProbing && (next == RailState::kUp || next == RailState::kDown)),
      "no transition from %s to %s", stateName(state_), stateName(next));
  state_ = next;
}

}  // namespace nnf::core
