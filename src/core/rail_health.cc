#include "core/rail_health.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdint>

#include "log/assert.h"

namespace nnf::core {
namespace {
// A rail that rejoined and failed again within this many probe intervals was not healed: its
// next probe waits twice as long (a path broken beyond our NIC passes our probe).
constexpr uint64_t kSoonAfterRejoin = 16;
constexpr uint32_t kMaxBackoff = 6;  // at most 64 intervals between probes
}  // namespace

RailHealth::RailHealth(size_t rails, uint64_t probeIntervalNs)
    : rails_(std::min<size_t>(rails, memory::kMaxRails)),
      probeIntervalNs_(probeIntervalNs),
      upMask_(allMask()) {}

bool RailHealth::isPathFailure(int error) {
  switch (error) {
    case FI_EHOSTUNREACH:  // efa: the remote was never reached on this path (prov_errno 15)
    case FI_ECONNABORTED:  // efa: the remote stopped answering (SRD's timeout, 13, 4124, 4126)
    case FI_ENETDOWN:
    case FI_ENETUNREACH:
      return true;
    // Not FI_ECONNRESET or FI_ETIMEDOUT: a socket reports them for a peer that died as well.
    default:
      return false;
  }
}

bool RailHealth::markDown(size_t rail, uint64_t nowNs) {
  if (rail >= rails_ || state(rail) != RailState::kUp) return false;
  if (failures_[rail] > 0 && nowNs - upSinceNs_[rail] < kSoonAfterRejoin * probeIntervalNs_) {
    backoff_[rail] = std::min(backoff_[rail] + 1, kMaxBackoff);
  } else {
    backoff_[rail] = 0;
  }
  ++failures_[rail];
  to(rail, RailState::kDown);
  nextProbeNs_[rail] = nowNs + waitNs(rail);
  return true;
}

uint64_t RailHealth::waitNs(size_t rail) const {
  return probeIntervalNs_ << backoff_[rail];
}

int RailHealth::takeDueProbe(uint64_t nowNs) {
  if (probeIntervalNs_ == 0 || allUp()) return -1;
  for (size_t rail = 0; rail < rails_; ++rail) {
    if (state(rail) == RailState::kDown && nowNs >= nextProbeNs_[rail]) {
      to(rail, RailState::kProbing);
      return static_cast<int>(rail);
    }
  }
  return -1;
}

uint64_t RailHealth::nextProbeInNs(uint64_t nowNs) const {
  uint64_t wait = UINT64_MAX;
  if (probeIntervalNs_ == 0 || allUp()) return wait;
  for (size_t rail = 0; rail < rails_; ++rail) {
    if (state(rail) == RailState::kProbing) return 0;
    if (state(rail) == RailState::kDown) {
      wait = std::min(wait, nextProbeNs_[rail] > nowNs ? nextProbeNs_[rail] - nowNs : 0);
    }
  }
  return wait;
}

void RailHealth::probeSucceeded(size_t rail, uint64_t nowNs) {
  to(rail, RailState::kUp);
  upSinceNs_[rail] = nowNs;
}

void RailHealth::probeFailed(size_t rail, uint64_t nowNs) {
  to(rail, RailState::kDown);
  nextProbeNs_[rail] = nowNs + waitNs(rail);
}

void RailHealth::to(size_t rail, RailState next) {
  RailState now = state(rail);
  NNF_ASSERT(
      (now == RailState::kUp && next == RailState::kDown) ||
          (now == RailState::kDown && next == RailState::kProbing) ||
          (now == RailState::kProbing && (next == RailState::kUp || next == RailState::kDown)),
      "rail %zu: no transition from %s to %s", rail, stateName(now), stateName(next));
  states_[rail] = next;
  if (next == RailState::kUp) {
    upMask_ |= 1u << rail;
  } else {
    upMask_ &= ~(1u << rail);
  }
}

}  // namespace nnf::core
