// Which rails of a device carry data (issue 27, docs/failover.md). A rail goes down at the first
// error that says its path is broken (its NIC, its link, or the peer's NIC: efa's "unreachable
// remote" and "unresponsive remote", the network errors of a socket); new messages then take
// the rails still up, and the device reports their speed. What was in flight on it goes again on
// the others (the rdma protocol's rail recovery). A rail that is down is probed every
// NCCL_FABRIC_RAIL_PROBE_MS (a small read through its own NIC, core/rail_probe.h) and rejoins
// when a probe succeeds; a rail that fails again soon after rejoining waits twice as long for
// its next probe each time (up to 64 times), so that a path broken beyond our own NIC (which a
// probe of our NIC cannot see) costs a recovery now and then rather than one every interval.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/region.h"

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

class RailHealth {
 public:
  // `probeIntervalNs`: the first wait between a rail's failure and its probe, and between
  // probes (0: a rail that went down stays down).
  explicit RailHealth(size_t rails, uint64_t probeIntervalNs = 0);

  size_t rails() const { return rails_; }
  // Whether a rail that went down is probed at all (NCCL_FABRIC_RAIL_PROBE_MS > 0).
  bool probes() const { return probeIntervalNs_ != 0; }
  RailState state(size_t rail) const { return states_[rail]; }
  // Bit r: rail r is up. Every rail is, until one fails: read on every multi-rail message.
  uint32_t upMask() const { return upMask_; }
  size_t upCount() const { return static_cast<size_t>(__builtin_popcount(upMask_)); }
  bool allUp() const { return upMask_ == allMask(); }

  // Whether a transfer's error `error` (a positive libfabric code) says that its path is broken,
  // rather than that the transfer itself was wrong (keys, lengths, a truncation) or the peer
  // process is gone (FI_ENOTCONN: its comms fail as before, whatever the rail).
  static bool isPathFailure(int error);

  // Rail `rail` failed a transfer on a broken path at `nowNs`: true when it went down now (the
  // caller logs it), false when it was down already.
  bool markDown(size_t rail, uint64_t nowNs);
  // Times rail `rail` went down (1 at its first failure: the caller WARNs then only).
  uint32_t failures(size_t rail) const { return failures_[rail]; }

  // A down rail whose probe is due at `nowNs` (marked kProbing: the caller posts its probe), or
  // -1 when none is.
  int takeDueProbe(uint64_t nowNs);
  // How long from `nowNs` until a down rail's probe is due (0: one is due, or a probe is in
  // flight); UINT64_MAX when no rail waits for a probe.
  uint64_t nextProbeInNs(uint64_t nowNs) const;
  // The probe of rail `rail` ended: it succeeded (the rail is up again) or not (down; probed
  // again one interval later).
  void probeSucceeded(size_t rail, uint64_t nowNs);
  void probeFailed(size_t rail, uint64_t nowNs);

  // The first of the first `rails` rails that is up: the leader while it is, and when none is.
  size_t firstUp(size_t rails) const {
    uint32_t mask = upMask_ & ((1u << rails) - 1);
    return mask != 0 ? static_cast<size_t>(__builtin_ctz(mask)) : 0;
  }
  // Where an operation of a comm of `rails` rails that failed on `failed` with `error` goes
  // again: the first of them up, when `error` says the path broke (the device took `failed`
  // down before the operation's owner heard) and another is up; -1 when it does not go again.
  int railInsteadOf(size_t failed, int error, size_t rails) const {
    if (rails < 2 || !isPathFailure(error)) return -1;
    size_t rail = firstUp(rails);
    return rail != failed && states_[rail] == RailState::kUp ? static_cast<int>(rail) : -1;
  }
  // The rails among the first `rails` that are up, lowest first, into `out` (kMaxRails
  // entries): their count. When none is, all `rails` of them: a comm whose every rail failed
  // fails its transfers as before, on whichever rail it posts them.
  size_t carrying(size_t rails, uint8_t* out) const {
    size_t count = 0;
    uint32_t mask = upMask_ & ((1u << rails) - 1);
    if (mask == 0) mask = (1u << rails) - 1;
    for (size_t r = 0; r < rails; ++r) {
      if ((mask >> r & 1u) != 0) out[count++] = static_cast<uint8_t>(r);
    }
    return count;
  }

 private:
  uint32_t allMask() const { return (1u << rails_) - 1; }
  // How long rail `rail` waits for its next probe: the interval, doubled for each failure that
  // came soon after a rejoin.
  uint64_t waitNs(size_t rail) const;
  // The one transition function of a rail (asserted in debug builds): up -> down,
  // down -> probing, probing -> up or down.
  void to(size_t rail, RailState next);

  size_t rails_;
  uint64_t probeIntervalNs_;
  uint32_t upMask_;
  RailState states_[memory::kMaxRails] = {};
  uint32_t failures_[memory::kMaxRails] = {};
  uint32_t backoff_[memory::kMaxRails] = {};      // doublings of the interval: 0..kMaxBackoff
  uint64_t nextProbeNs_[memory::kMaxRails] = {};  // kDown: when its probe is due
  uint64_t upSinceNs_[memory::kMaxRails] = {};    // kUp after a rejoin: since when
};

}  // namespace nnf::core
