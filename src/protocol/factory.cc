#include "protocol/factory.h"

#include "core/device.h"
#include "protocol/rdma.h"
#include "protocol/sendrecv.h"

namespace nnf::protocol {

std::unique_ptr<Protocol> Factory::create(core::Device& device, const core::DeviceSpec& spec,
                                          DeviceSetup& setup) const {
  if (spec.rdma) return std::make_unique<Rdma>(device, setup);
  return std::make_unique<SendRecv>();
}

}  // namespace nnf::protocol
