#include "core/listen_comm.h"

#include <algorithm>

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

void ListenComm::onControlMessage(wire::ControlKind kind, const uint8_t* data, size_t length,
                                  size_t rail) {
  if (kind != wire::ControlKind::kConnect) return;
  wire::ConnectMessage message;
  std::string reason;
  if (wire::decodeConnectMessage(data, length, id(), &message, &reason)) {
    Connector connector{message.hostId, message.pid, message.senderCommId};
    if (std::find(connected_.begin(), connected_.end(), connector) != connected_.end()) return;
    connected_.push_back(connector);
    pending_.push_back(Pending{message, rail});
  } else {
    NNF_WARN("dropping a connection request on listener %u: %s", id(), reason.c_str());
  }
}

abi::Result ListenComm::accept(RecvComm** out) {
  *out = nullptr;
  abi::Result result = abi::kSuccess;
  size_t started = 0;
  for (; started < pending_.size(); ++started) {
    RecvComm* comm =
        device().createComm<RecvComm>(static_cast<size_t>(device().properties().maxRecvs));
    if (comm == nullptr) {  // logged; the requests left wait for the next call
      result = abi::kSystemError;
      break;
    }
    if (comm->start(pending_[started].message, pending_[started].rail) != abi::kSuccess) {
      // Through the normal close: start() may have posted a send that points into the comm.
      device().closeComm(*comm);
      result = abi::kSystemError;
      continue;
    }
    accepting_.push_back(comm);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(started));
  for (auto it = accepting_.begin(); it != accepting_.end();) {
    RecvComm* comm = *it;
    if (comm->failed()) {
      device().closeComm(*comm);
      it = accepting_.erase(it);
      if (result == abi::kSuccess) result = abi::kRemoteError;
    } else if (comm->ready() && *out == nullptr && result == abi::kSuccess) {
      *out = comm;
      it = accepting_.erase(it);
    } else {
      ++it;
    }
  }
  return result;
}

}  // namespace nnf::core
