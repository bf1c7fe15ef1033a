// What the rdma protocol keeps per device: the arenas of the comms' descriptor rings and bounce
// areas, and the limits its writes and eager messages follow there. Set up in two steps: when
// the device's rails are open (the write segments, which bound the device's messages) and when
// its memory registry is up (the arenas, the eager limit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/control_arena.h"
#include "core/protocol.h"

namespace nnf::core {
class Device;
}  // namespace nnf::core

namespace nnf::protocol {

class RdmaDevice {
 public:
  // The device's rails are open: sizes the write segments and lowers the device's largest
  // message to what kMaxSegments of them carry.
  RdmaDevice(core::Device& device, DeviceSetup& setup);
  RdmaDevice(const RdmaDevice&) = delete;
  RdmaDevice& operator=(const RdmaDevice&) = delete;

  // The device's memory registry is up: the arenas and the eager set-up.
  void start();
  // The device is going: the arenas' registrations close before its domain.
  void release();

  // The comms' descriptor rings.
  core::ControlArena* ringArena() { return ringArena_.get(); }
  // The receive comms' bounce areas for eager messages (null when eager is off).
  core::ControlArena* eagerArena() { return eagerArena_.get(); }
  // The largest message sent eagerly (0: none; NCCL_FABRIC_EAGER_MAX or the provider's rule).
  size_t eagerMaxBytes() const { return eagerMaxBytes_; }
  // Whether a GPU message may go eagerly (a write of a host header and the GPU buffer).
  bool eagerFromGpuMemory() const { return eagerFromGpuMemory_; }
  // Messages from this size on are cut over every rail (NCCL_FABRIC_STRIPE_MIN).
  size_t stripeMinBytes() const { return stripeMinBytes_; }
  // The largest segment one write carries (2 GiB, and what the provider writes as one).
  uint64_t writeSegmentBytes() const { return writeSegmentBytes_; }
  // True when the immediate data of a write has room for its length (see protocol/rdma_wire.h).
  bool immediateCarriesLength() const { return immediateLength_; }
  // The device's inject size, to gather an eager header and message in before injecting them
  // (the provider copies them before inject returns, so one buffer serves every comm).
  uint8_t* injectScratch() { return injectScratch_.data(); }

 private:
  void setUpEager();

  core::Device& device_;
  bool immediateLength_ = false;
  uint64_t writeSegmentBytes_ = 0;
  size_t stripeMinBytes_ = 0;
  size_t eagerMaxBytes_ = 0;
  bool eagerFromGpuMemory_ = true;
  std::vector<uint8_t> injectScratch_;
  std::unique_ptr<core::ControlArena> ringArena_;
  std::unique_ptr<core::ControlArena> eagerArena_;
};

}  // namespace nnf::protocol
