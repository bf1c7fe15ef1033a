// A peer's write that failed at our NIC (an error completion with a NULL context and the
// write's immediate data): the comm it was for cannot complete what waits for it.
#include "core/data_comm.h"
#include "core/device.h"
#include "protocol/rdma.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol {

bool Rdma::onRemoteWriteError(core::Device& device, uint64_t data, const char* why) {
  rdma::Immediate imm = rdma::decode(data);
  core::Comm* comm = device.findComm(imm.commId);
  if (comm == nullptr || comm->kind() == core::Comm::Kind::kListen) return false;
  // Whatever the write carried (a segment, an eager message, descriptors, credits, a void), the
  // comm's accounting now misses it: a receive would wait for ever, a send for its descriptor, a
  // slot for its void. Failing one buffer would not do: its slot could be reused while other
  // segments of the message are still on their way.
  static_cast<core::DataComm*>(comm)->failLost(why);
  return true;
}

}  // namespace nnf::protocol
