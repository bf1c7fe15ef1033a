// The RMA layer on one device: the table that turns a landed write's link id into the group
// and peer it belongs to, and the device's sink for writes carrying the RMA mark. One per
// device, made when RMA first uses it; every group on the device shares it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/remote_writes.h"

namespace nnf::core {
class Device;
}

namespace nnf::rma {

class Group;

class Engine final : public core::RemoteWriteSink {
 public:
  explicit Engine(core::Device& device) : device_(device) {}
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  core::Device& device() const { return device_; }

  // --- device lock held ---

  // Reserves `count` consecutive link ids for `group` (peer p gets base + p). Blocks are taken
  // round-robin, so that a closed group's ids are not reused while late writes may still come.
  bool allocateLinks(uint32_t count, Group* group, uint32_t* base);
  void releaseLinks(uint32_t base, uint32_t count);
  void onRemoteWrite(core::Device& device, size_t rail, uint64_t data, size_t length) override;
  // Landed writes that named no open group (a closed one's, or the loopback signal writes).
  uint64_t dropped() const { return dropped_; }

 private:
  struct LinkRef {
    Group* group = nullptr;
    uint32_t peer = 0;
  };
  core::Device& device_;
  std::vector<LinkRef> links_;  // kMaxLinks, made with the first group
  uint32_t cursor_ = 1;         // id 0 marks the loopback writes of GPU signal words
  uint64_t dropped_ = 0;
};

}  // namespace nnf::rma
