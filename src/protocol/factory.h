// The protocols this library carries: rdma where the device's plan says its rails move data with
// RMA writes (DeviceSpec::rdma), sendrecv elsewhere. The plugin's assembly hands it to core.
#pragma once

#include "core/protocol.h"

namespace nnf::protocol {

class Factory final : public ProtocolFactory {
 public:
  std::unique_ptr<Protocol> create(core::Device& device, const core::DeviceSpec& spec,
                                   DeviceSetup& setup) const override;
};

}  // namespace nnf::protocol
