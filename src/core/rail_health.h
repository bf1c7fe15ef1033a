// Which rails of a device carry data (issue 27, docs/failover.md). A transfer's error that says
// its path is broken (efa's "unreachable remote" and "unresponsive remote", the network errors of
// a socket) first takes that one path down (core/path_health.h) and asks our own NIC at once (a
// small read through it to ourselves, core/rail_probe.h): when that fails too, our NIC or its
// link is at fault and the rail goes down for every peer. New messages then take the rails
// still up, and the device reports their speed. What was in flight on it goes again on the
// others (the rdma protocol's rail recovery). A rail that is down is probed every
// NCCL_FABRIC_RAIL_PROBE_MS by the same read and rejoins when one succeeds (core/probe_schedule.h:
// a rail that fails again soon after rejoining waits longer each time). Without probes
// (NCCL_FABRIC_RAIL_PROBE_MS=0) nothing can tell our NIC from the path: the rail goes down at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/probe_schedule.h"
#include "memory/region.h"

namespace nnf::core {

class RailHealth {
 public:
  // `probeIntervalNs`: the first wait between a rail's failure and its probe, and between
  // probes (0: a rail that went down stays down).
  explicit RailHealth(size_t rails, uint64_t probeIntervalNs = 0);

  size_t rails() const { return rails_; }
  // Whether a rail that went down is probed at all (NCCL_FABRIC_RAIL_PROBE_MS > 0).
  bool probes() const { return probeIntervalNs_ != 0; }
  RailState state(size_t rail) const { return links_[rail].state(); }
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
  uint32_t failures(size_t rail) const { return links_[rail].failures(); }

  // A down rail whose probe is due at `nowNs` (marked kProbing: the caller posts its probe), or
  // -1 when none is. Rails in `busy` (their probe's operation is taken) are left for later.
  int takeDueProbe(uint64_t nowNs, uint32_t busy = 0);
  // How long from `nowNs` until a down rail's probe is due (0: one is due, or a probe is in
  // flight); UINT64_MAX when no rail waits for a probe.
  uint64_t nextProbeInNs(uint64_t nowNs) const;
  // The probe of rail `rail` ended: it succeeded (the rail is up again) or not (down; probed
  // again one interval later).
  void probeSucceeded(size_t rail, uint64_t nowNs);
  void probeFailed(size_t rail, uint64_t nowNs);

  // The rails among the first `rails` that a comm whose paths in `pathsDown` are broken (bit r:
  // its path on rail r, core/path_health.h) may use.
  uint32_t usable(size_t rails, uint32_t pathsDown) const {
    return upMask_ & ~pathsDown & ((1u << rails) - 1);
  }
  // The first of them: the leader while it is usable, and when none is.
  size_t firstUp(size_t rails, uint32_t pathsDown) const {
    uint32_t mask = usable(rails, pathsDown);
    return mask != 0 ? static_cast<size_t>(__builtin_ctz(mask)) : 0;
  }
  // Where an operation of a comm of `rails` rails that failed on `failed` with `error` goes
  // again: the first of them usable, when `error` says the path broke (the device took `failed`,
  // or the comm's path on it, down before the operation's owner heard) and another is usable;
  // -1 when it does not go again.
  int railInsteadOf(size_t failed, int error, size_t rails, uint32_t pathsDown) const {
    if (rails < 2 || !isPathFailure(error)) return -1;
    uint32_t mask = usable(rails, pathsDown);
    if (mask == 0) return -1;
    size_t rail = static_cast<size_t>(__builtin_ctz(mask));
    return rail != failed ? static_cast<int>(rail) : -1;
  }
  // The rails among the first `rails` usable (as above), lowest first, into `out` (kMaxRails
  // entries): their count. When none is, all `rails` of them: a comm whose every rail failed
  // fails its transfers as before, on whichever rail it posts them.
  size_t carrying(size_t rails, uint8_t* out, uint32_t pathsDown) const {
    size_t count = 0;
    uint32_t mask = usable(rails, pathsDown);
    if (mask == 0) mask = (1u << rails) - 1;
    for (size_t r = 0; r < rails; ++r) {
      if ((mask >> r & 1u) != 0) out[count++] = static_cast<uint8_t>(r);
    }
    return count;
  }

 private:
  uint32_t allMask() const { return (1u << rails_) - 1; }
  void noteState(size_t rail);

  size_t rails_;
  uint64_t probeIntervalNs_;
  uint32_t upMask_;
  ProbeSchedule links_[memory::kMaxRails];
};

}  // namespace nnf::core
