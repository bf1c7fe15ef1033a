// Which paths of a device are broken (issue 27, docs/failover.md "The unit of failure is a
// path"). A path is one rail of ours to one peer endpoint (its address on that rail). At
// thousands of GPUs a peer's NIC, its cable or its switch port fails as often as ours; had its
// failure taken our rail down, every comm of ours would lose that NIC's share for one broken
// peer (and every rank that talks to that peer would do the same). So a transfer that fails on
// a broken path takes that path down only: the comms to that peer leave the rail out, the others
// keep it. The device asks our own NIC at once (core/rail_health.h); when it fails too, the rail
// goes down as a whole and its paths are forgotten here. A broken path is probed every
// NCCL_FABRIC_RAIL_PROBE_MS (a header-only control message to the peer on that rail) and
// rejoins when one is delivered (core/probe_schedule.h's back-off).
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>

#include "core/probe_schedule.h"

namespace nnf::core {

class PathHealth {
 public:
  // Broken paths a device keeps at once: beyond them a path's failure takes its rail down as a
  // whole (as without per-path health).
  static constexpr size_t kMaxPaths = 64;
  static constexpr size_t kWhatBytes = 320;  // as onTransferError writes it

  struct Path {
    bool used = false;
    bool named = false;  // its failure was logged
    uint8_t rail = 0;
    fi_addr_t peer = FI_ADDR_UNSPEC;
    ProbeSchedule link;
    char what[kWhatBytes] = {};  // how it failed last
  };

  enum class Marked : uint8_t {
    kNow,      // it went down now
    kAlready,  // it was down already
    kNoRoom,   // the table is full of broken paths
  };

  // `probeIntervalNs`: the first wait between a path's failure and its probe (0: never probed).
  explicit PathHealth(uint64_t probeIntervalNs) : probeIntervalNs_(probeIntervalNs) {}

  // Path (rail, peer) failed a transfer at `nowNs`, as `what` says; *index names it.
  Marked markDown(size_t rail, fi_addr_t peer, uint64_t nowNs, const char* what, int* index);
  // Paths down or being probed: 0 on a healthy device, where comms need not look further.
  size_t downCount() const { return down_; }
  bool isDown(size_t rail, fi_addr_t peer) const;
  const Path& at(int index) const { return paths_[index]; }

  // A path of `rail` that is down and not named yet (marked named now), or -1.
  int takeUnnamed(size_t rail);
  // The paths of `rail` are forgotten (the rail failed, or rejoined, as a whole), but for those
  // whose probe is in flight: they end with it.
  void forgetRail(size_t rail);
  // Path `index` is forgotten (no comm goes to its peer any more; none of its probes in flight).
  void forget(int index);
  // The peer of rail `rail` got a fresh address (the device removed and inserted it again).
  void replacePeer(size_t rail, fi_addr_t from, fi_addr_t to);

  // A down path whose probe is due at `nowNs` (marked probing: the caller posts it), or -1.
  int takeDueProbe(uint64_t nowNs);
  // How long from `nowNs` until a path's probe is due (0: one is in flight or due);
  // UINT64_MAX when none waits.
  uint64_t nextProbeInNs(uint64_t nowNs) const;
  void probeSucceeded(int index, uint64_t nowNs);
  void probeFailed(int index, uint64_t nowNs);

 private:
  int find(size_t rail, fi_addr_t peer) const;
  // A free entry, or one of a path that is up again (its back-off forgotten); -1 when none.
  int room() const;
  void recount();

  uint64_t probeIntervalNs_;
  size_t down_ = 0;
  Path paths_[kMaxPaths];
};

}  // namespace nnf::core
