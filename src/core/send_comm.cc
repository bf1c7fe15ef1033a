#include "core/send_comm.h"

#include <cstring>
#include <random>

#include "core/device.h"
#include "core/tags.h"
#include "log/log.h"

namespace nnf::core {

static_assert(sizeof(wire::ConnectMessage) + sizeof(wire::AcceptMessage) + 1 <= ControlSlot::kSize);

SendComm::SendComm(Device& device, uint32_t id, size_t maxRecvs)
    : DataComm(device, Kind::kSend, id, abi::kMaxRequests * maxRecvs, 1) {
  // The token pairs the id with a random nonce so that a stale or forged handle cannot name
  // another connection.
  std::random_device entropy;
  token_ = (uint64_t{entropy()} << 32) | id;
  connectSend_.owner = this;
  connectSend_.type = OpType::kSend;
  acceptReceive_.owner = this;
  acceptReceive_.type = OpType::kRecv;
}

abi::Result SendComm::start(const wire::ListenHandle& handle) {
  int ret = device().peerAddress(handle.address, handle.addressLength, &peer_);
  if (ret != 0) {
    NNF_WARN("cannot add the listener's address from the handle: %s", fi_strerror(-ret));
    return abi::kSystemError;
  }
  if (!acquireControl()) return abi::kSystemError;
  // The slot holds the outgoing connect message, then room for the accept message (one byte
  // more than a valid one, so that an oversized one shows up as truncated).
  uint8_t* connectBuffer = control().data;
  uint8_t* acceptBuffer = connectBuffer + sizeof(wire::ConnectMessage);
  acceptReceive_.buffer = acceptBuffer;
  acceptReceive_.length = sizeof(wire::AcceptMessage) + 1;
  acceptReceive_.desc = control().desc;
  acceptReceive_.tag = tags::control(id(), tags::ControlKind::kAccept);
  abi::Result result = device().post(acceptReceive_);
  if (result != abi::kSuccess) return result;
  result = startLiveness();
  if (result != abi::kSuccess) return result;

  const auto& address = device().rail().address();
  wire::ConnectMessage message =
      wire::makeConnectMessage(id(), handle.listenerId, address.data(), address.size());
  memcpy(connectBuffer, &message, sizeof(message));
  connectSend_.buffer = connectBuffer;
  connectSend_.length = sizeof(message);
  connectSend_.desc = control().desc;
  connectSend_.peer = peer_;
  connectSend_.tag = tags::control(handle.listenerId, tags::ControlKind::kConnect);
  return device().post(connectSend_);
}

void SendComm::onControlComplete(Operation& op, size_t length) {
  if (closed() || state_ == State::kFailed) return;
  if (&op == &connectSend_) {
    connectSent_ = true;
  } else {
    wire::AcceptMessage message;
    std::string reason;
    if (!wire::decodeAcceptMessage(control().data + sizeof(wire::ConnectMessage), length, id(),
                                   &message, &reason)) {
      NNF_WARN("connection of comm %u failed: invalid accept message: %s", id(), reason.c_str());
      state_ = State::kFailed;
      return;
    }
    remoteId_ = message.recvCommId;
    setPeerIdentity(message.pid, message.hostId);
    acceptReceived_ = true;
  }
  if (connectSent_ && acceptReceived_) state_ = State::kReady;
}

void SendComm::onControlError(Operation& op, int error, const char* text) {
  if (closed()) return;
  NNF_WARN("connection of comm %u failed while %s: %s (%s)", id(),
           &op == &connectSend_ ? "sending the connect message" : "receiving the accept message",
           fi_strerror(error), text != nullptr ? text : "");
  state_ = State::kFailed;
}

}  // namespace nnf::core
