#include "core/listen_comm.h"

#include "core/device.h"
#include "core/recv_comm.h"
#include "log/log.h"

namespace nnf::core {

ListenComm::ListenComm(Device& device, uint32_t id) : Comm(device, Kind::kListen, id) {}

void ListenComm::cancelInFlight() {
  // Receive comms still being accepted were never seen by NCCL: they go with the listener.
  for (RecvComm* comm : accepting_) device().closeComm(*comm);
  accepting_.clear();
}

void ListenComm::onControlMessage(wire::ControlKind kind, const uint8_t* data, size_t length) {
  if (kind != wire::ControlKind::kConnect) return;
  wire::ConnectMessage message;
  std::string reason;
  if (wire::decodeConnectMessage(data, length, id(), &message, &reason)) {
    pending_.push_back(message);
  } else {
    NNF_WARN("dropping a connection request on listener %u: %s", id(), reason.c_str());
  }
}

abi::Result ListenComm::accept(RecvComm** out) {
  *out = nullptr;
  abi::Result result = abi::kSuccess;
  for (const wire::ConnectMessage& message : pending_) {
    RecvComm* comm =
        device().createComm<RecvComm>(static_cast<size_t>(device().properties().maxRecvs));
    if (comm == nullptr) {
      result = abi::kSystemError;
      break;
    }
    if (comm->start(message) != abi::kSuccess) {
      // Through the normal close: start() may have posted a send that points into the comm.
      device().closeComm(*comm);
      result = abi::kSystemError;
      continue;
    }
    accepting_.push_back(comm);
  }
  pending_.clear();
  for (size_t i = 0; i < accepting_.size(); ++i) {
    RecvComm* comm = accepting_[i];
    if (comm->failed()) {
      device().closeComm(*comm);
      accepting_.erase(accepting_.begin() + static_cast<ptrdiff_t>(i--));
      if (result == abi::kSuccess) result = abi::kRemoteError;
    } else if (comm->ready() && *out == nullptr && result == abi::kSuccess) {
      *out = comm;
      accepting_.erase(accepting_.begin() + static_cast<ptrdiff_t>(i--));
    }
  }
  return result;
}

}  // namespace nnf::core
