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

abi::Result RecvComm::start(const wire::ConnectMessage& request, size_t arrivalRail) {
  int ret = device().peerAddress(request.address, request.addressLength, &peer_);
  if (ret != 0) {
    NNF_WARN("cannot add the address of a connecting peer: %s", fi_strerror(-ret));
    return abi::kSystemError;
  }
  remoteId_ = request.senderCommId;
  setPeerIdentity(request.pid, request.hostId);
  if (!acquireControl()) return abi::kSystemError;
  protocol::Protocol& protocol = device().protocol();
  if (request.protocol != static_cast<uint16_t>(protocol.id())) {
    // Answered all the same, so that the sender fails at once instead of waiting.
    NNF_WARN(
        "refusing a connection on comm %u: the sender runs another data protocol than %s (set "
        "NCCL_FABRIC_PROTOCOL alike on every rank)",
        id(), protocol.name());
    protocolMismatch_ = true;
  } else {
    protocol::ConnectInfo info;
    info.ringAddress = request.ringAddress;
    info.ringKey = request.ringKey;
    memcpy(info.ringRailKeys, request.ringRailKeys, sizeof(info.ringRailKeys));
    abi::Result result = protocol.startRecv(*this, info);
    if (result != abi::kSuccess) return result;
  }
  // Data and the protocol's own messages move on the rails both devices have, rail r to rail r
  // (the same network): the sender's are in its connect message.
  if (!adoptPeerRails(request.rails, "the sender")) return abi::kSystemError;
  wire::AcceptMessage message = wire::makeAcceptMessage(
      id(), request.senderCommId, static_cast<uint32_t>(protocol.id()), device().railAddresses());
  // Back on the rail the connect message came on: that path works (the sender's leader may not).
  return device().controlChannel().sendSetUp(setUpRail(arrivalRail), acceptSend_, control(), *this,
                                             request.senderCommId, wire::ControlKind::kAccept,
                                             &message, sizeof(message));
}

void RecvComm::onControlMessage(wire::ControlKind kind, const uint8_t* data, size_t length,
                                size_t rail) {
  if (kind == wire::ControlKind::kClosedAck) {
    device().protocol().onPeerClosedAck(*this, data, length);
  } else if (kind == wire::ControlKind::kProtocol && state_ == State::kReady) {
    device().protocol().onProtocolMessage(*this, data, length);
  }
}

void RecvComm::onControlComplete(Operation& op, size_t length) {
  if (state_ == State::kAccepting) state_ = protocolMismatch_ ? State::kFailed : State::kReady;
}

void RecvComm::onControlError(Operation& op, int error, const char* text) {
  if (closed()) return;
  if (device().controlChannel().sendAgain(op, control(), *this, error)) return;
  NNF_WARN("sending the accept message of comm %u failed: %s (%s)", id(), fi_strerror(error),
           text != nullptr ? text : "");
  state_ = State::kFailed;
}

}  // namespace nnf::core
