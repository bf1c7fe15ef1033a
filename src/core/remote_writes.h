// Peers' RMA writes that belong to the one-sided RMA plugin (src/rma) rather than to the data
// protocol. Both share a device's endpoints and completion queues, so the device tells them
// apart by the immediate data: the RMA layer marks its writes with bit 31 set and 31 in bits
// 4..0, a control kind the rdma protocol never uses (its kinds are 0 to 3, protocol/rdma_wire.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nnf::core {

class Device;

constexpr uint32_t kRmaImmediateMask = 0x8000001fu;
constexpr uint32_t kRmaImmediateMark = 0x8000001fu;

inline bool isRmaImmediate(uint64_t data) {
  return (static_cast<uint32_t>(data) & kRmaImmediateMask) == kRmaImmediateMark;
}

// Receives the writes carrying the RMA mark (device lock held, called from progress()).
class RemoteWriteSink {
 public:
  virtual void onRemoteWrite(Device& device, size_t rail, uint64_t data, size_t length) = 0;

 protected:
  ~RemoteWriteSink() = default;
};

}  // namespace nnf::core
