// Probes the broken paths of a device (core/path_health.h): a control message of a header only,
// addressed to no comm (id 0, which no comm has), sent on the path's rail to the peer's control
// endpoint there. Its peer drops it (a TRACE line); its send completes once the peer's NIC took
// it (efa: the SRD acknowledgement), so success says that the path carries operations again,
// both NICs and the links between them included: what a read through our own NIC cannot see.
#pragma once

#include <cstddef>

#include "core/control_arena.h"
#include "core/operation.h"
#include "core/path_health.h"

namespace nnf::core {

class Device;

class PathProbe final : private OperationOwner {
 public:
  explicit PathProbe(Device& device) : device_(device) {}
  ~PathProbe();
  PathProbe(const PathProbe&) = delete;
  PathProbe& operator=(const PathProbe&) = delete;

  // Posts the probe of path `index` (device lock held) at `nowNs`; its end comes to
  // Device::onPathProbeEnded. False when it could not be posted (logged where it failed).
  bool post(int index, size_t rail, fi_addr_t peer, uint64_t nowNs);
  bool owns(const Operation& op) const { return op.owner == this; }
  // Each probe with the provider that was posted before `sinceNs`: a path that stays silent
  // never answers its probe (visit(op), to take it back).
  template <typename Visit>
  void forEachPostedBefore(uint64_t sinceNs, Visit&& visit) {
    for (size_t i = 0; i < PathHealth::kMaxPaths; ++i) {
      if (ops_[i].inFlight && postedNs_[i] < sinceNs) visit(ops_[i]);
    }
  }
  // Each probe with the provider on `rail` (efa never completes one whose handshake failed).
  template <typename Visit>
  void forEachInFlightOn(size_t rail, Visit&& visit) {
    for (Operation& op : ops_) {
      if (op.inFlight && op.rail == rail) visit(op);
    }
  }

 private:
  void onComplete(Operation& op, size_t length) override;
  void onError(Operation& op, int error, size_t overflow, const char* text) override;
  int indexOf(const Operation& op) const { return static_cast<int>(&op - ops_); }

  Device& device_;
  ControlSlot header_;  // the message, written once (taken at the first probe)
  Operation ops_[PathHealth::kMaxPaths];
  uint64_t postedNs_[PathHealth::kMaxPaths] = {};
};

}  // namespace nnf::core
