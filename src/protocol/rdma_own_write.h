// A comm's own write into its peer's arena slot (descriptors, credits, the eager limit).
#pragma once

#include "core/device.h"
#include "core/operation.h"

namespace nnf::protocol::rdma {

// Inline where nothing can overtake it (the close notice follows on the same endpoint), so no
// completion is read and the source is free on return; posted where the provider delivers out of
// order or has no room.
inline abi::Result writeOwn(core::Device& device, core::Operation& write) {
  abi::Result result = abi::kInProgress;
  if (device.deliversInOrder() && write.length <= device.injectLimit()) {
    result = device.inject(write);
  }
  return result == abi::kInProgress ? device.post(write) : result;
}

}  // namespace nnf::protocol::rdma
