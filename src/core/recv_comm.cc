#include "core/recv_comm.h"

#include <cstring>

#include "core/device.h"
#include "core/tags.h"
#include "log/log.h"

namespace nnf::core {

RecvComm::RecvComm(Device& device, uint32_t id, size_t maxRecvs)
    : DataComm(device, Kind::kRecv, id, abi::kMaxRequests, &device.groupOps()),
      maxRecvs_(maxRecvs) {
  acceptSend_.owner = this;
}

abi::Result RecvComm::start(const wire::ConnectMessage& request) {
  int ret = device().peerAddress(request.address, request.addressLength, &peer_);
  if (ret != 0) {
    NNF_WARN("cannot add the address of a connecting peer: %s", fi_strerror(-ret));
    return abi::kSystemError;
  }
  remoteId_ = request.senderCommId;
  setPeerIdentity(request.pid, request.hostId);
  if (!acquireControl()) return abi::kSystemError;
  wire::AcceptMessage message = wire::makeAcceptMessage(id(), request.senderCommId);
  return device().controlChannel().send(acceptSend_, control().data, control().desc, peer_,
                                        request.senderCommId, wire::ControlKind::kAccept, &message,
                                        sizeof(message));
}

void RecvComm::onControlComplete(Operation& op, size_t length) {
  if (state_ == State::kAccepting) state_ = State::kReady;
}

void RecvComm::onControlError(Operation& op, int error, const char* text) {
  if (closed()) return;
  NNF_WARN("sending the accept message of comm %u failed: %s (%s)", id(), fi_strerror(error),
           text != nullptr ? text : "");
  state_ = State::kFailed;
}

}  // namespace nnf::core
