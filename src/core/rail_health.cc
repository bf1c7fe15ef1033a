#include "core/rail_health.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdint>

namespace nnf::core {

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

void RailHealth::noteState(size_t rail) {
  if (links_[rail].state() == RailState::kUp) {
    upMask_ |= 1u << rail;
  } else {
    upMask_ &= ~(1u << rail);
  }
}

bool RailHealth::markDown(size_t rail, uint64_t nowNs) {
  if (rail >= rails_ || !links_[rail].markDown(nowNs, probeIntervalNs_)) return false;
  noteState(rail);
  return true;
}

int RailHealth::takeDueProbe(uint64_t nowNs, uint32_t busy) {
  if (allUp()) return -1;
  for (size_t rail = 0; rail < rails_; ++rail) {
    if ((busy >> rail & 1u) == 0 && links_[rail].due(nowNs, probeIntervalNs_)) {
      links_[rail].startProbe();
      return static_cast<int>(rail);
    }
  }
  return -1;
}

uint64_t RailHealth::nextProbeInNs(uint64_t nowNs) const {
  uint64_t wait = UINT64_MAX;
  if (probeIntervalNs_ == 0 || allUp()) return wait;
  for (size_t rail = 0; rail < rails_; ++rail) wait = std::min(wait, links_[rail].waitFrom(nowNs));
  return wait;
}

void RailHealth::probeSucceeded(size_t rail, uint64_t nowNs) {
  links_[rail].probeSucceeded(nowNs);
  noteState(rail);
}

void RailHealth::probeFailed(size_t rail, uint64_t nowNs) {
  links_[rail].probeFailed(nowNs, probeIntervalNs_);
  noteState(rail);
}

}  // namespace nnf::core
