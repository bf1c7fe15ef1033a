// Probes the rails of a device that went down (core/rail_health.h): an 8-byte RMA read through
// the rail's own NIC from a word of ours, registered on every rail, addressed to our own
// endpoint on that rail. It succeeds once the NIC and its link carry operations again; then the
// rail rejoins. It sees our side only: a path broken beyond our NIC (a peer's NIC) passes it, and
// the next write over that path fails the rail again (RailHealth waits longer each time).
// A read, not a write: it needs no immediate data, so nothing arrives at any comm.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>

#include "core/operation.h"
#include "memory/region.h"

namespace nnf::core {

class Device;
struct MemoryHandle;

class RailProbe final : private OperationOwner {
 public:
  // Registers the word and inserts our own address on each rail of `device`. Throws
  // std::runtime_error when it cannot (construction only).
  explicit RailProbe(Device& device);
  ~RailProbe();
  RailProbe(const RailProbe&) = delete;
  RailProbe& operator=(const RailProbe&) = delete;

  // Posts the probe of rail `rail` (device lock held); its end comes to
  // Device::onProbeEnded. False when the post failed at once (logged by the engine).
  bool post(size_t rail);
  // Whether `op` is one of ours (its errors are the probe's answer, not news of the rail).
  bool owns(const Operation& op) const { return op.owner == this; }
  // Before the registrations go (the device's teardown).
  void deregister();

 private:
  void onComplete(Operation& op, size_t length) override;
  void onError(Operation& op, int error, size_t overflow, const char* text) override;

  Device& device_;
  uint64_t words_[2] = {};  // [0] is read, [1] is read into
  MemoryHandle* handle_ = nullptr;
  fi_addr_t self_[memory::kMaxRails] = {};
  Operation ops_[memory::kMaxRails];
};

}  // namespace nnf::core
