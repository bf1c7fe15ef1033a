// When one link that went down is probed (a rail of a device, core/rail_health.h, or a path from a
// rail to one peer, core/path_health.h): up -> down at a failure, down -> probing when the probe
// is due, probing -> up or down by its answer. A link that fails again soon after it rejoined
// waits twice as long for its next probe each time (up to 64 intervals): a break the probe cannot
// see then costs a recovery now and then rather than one every interval.
#pragma once

#include <cstdint>

namespace nnf::core {

enum class RailState : uint8_t {
  kUp,       // carries data
  kDown,     // failed a transfer on a broken path: nothing new goes on it; probed when due
  kProbing,  // down, with a probe in flight
};

inline const char* stateName(RailState state) {
  switch (state) {
    case RailState::kUp:
      return "up";
    case RailState::kDown:
      return "down";
    case RailState::kProbing:
      return "probing";
  }
  return "?";
}

class ProbeSchedule {
 public:
  RailState state() const { return state_; }
  // Times it went down (1 at its first failure: its owner WARNs then only).
  uint32_t failures() const { return failures_; }

  // It failed at `nowNs`, its probes `intervalNs` apart: true when it went down now, false when
  // it was down already.
  bool markDown(uint64_t nowNs, uint64_t intervalNs);
  // Down with its probe due at `nowNs` (0 `intervalNs`: never probed).
  bool due(uint64_t nowNs, uint64_t intervalNs) const {
    return intervalNs != 0 && state_ == RailState::kDown && nowNs >= nextProbeNs_;
  }
  // How long from `nowNs` until its probe is due: 0 while one is in flight or due, UINT64_MAX
  // while it is up.
  uint64_t waitFrom(uint64_t nowNs) const;
  void startProbe() { to(RailState::kProbing); }
  void probeSucceeded(uint64_t nowNs);
  void probeFailed(uint64_t nowNs, uint64_t intervalNs);

 private:
  // The one transition function (asserted in debug builds).
  void to(RailState next);

  RailState state_ = RailState::kUp;
  uint32_t failures_ = 0;
  uint32_t backoff_ = 0;      // doublings of the interval: 0..kMaxBackoff
  uint64_t nextProbeNs_ = 0;  // kDown: when its probe is due
  uint64_t upSinceNs_ = 0;    // kUp after a rejoin: since when
};

}  // namespace nnf::core
