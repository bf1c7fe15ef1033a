#include "core/send_comm.h"

#include <algorithm>
#include <cstring>

#include "core/device.h"
#include "core/tags.h"
#include "log/log.h"

namespace nnf::core {

static_assert(sizeof(wire::ConnectMessage) <= ControlChannel::kMaxPayload);

SendComm::SendComm(Device& device, uint32_t id, size_t maxRecvs)
    : DataComm(device, Kind::kSend, id, abi::kMaxRequests * maxRecvs, nullptr, device.railCount()) {
  // The token pairs the id with a random nonce so that a stale or forged handle cannot name
  // another connection (one generator per device: std::random_device costs ~27 us to open).
  token_ = (uint64_t{device.nextNonce()} << 32) | id;
  connectSend_.owner = this;
}

abi::Result SendComm::start(const wire::ListenHandle& handle) {
  int ret = device().peerAddress(handle.address, handle.addressLength, &peer_);
  if (ret != 0) {
    NNF_WARN("cannot add the listener's address from the handle: %s", fi_strerror(-ret));
    return abi::kSystemError;
  }
  if (!acquireControl()) return abi::kSystemError;
  protocol::Protocol& protocol = device().protocol();
  protocol::ConnectInfo info;
  abi::Result result = protocol.startSend(*this, &info);
  if (result != abi::kSuccess) return result;
  const auto& address = device().rail().address();
  wire::ConnectMessage message = wire::makeConnectMessage(
      id(), handle.listenerId, address.data(), address.size(), static_cast<uint16_t>(protocol.id()),
      info.ringAddress, info.ringKey, info.ringRailKeys, device().railAddresses());
  // On the leader, or on the first rail up toward the listener when our leader or our path to
  // its leader is down (a NIC that failed before NCCL connects this peer).
  if (!adoptListenerRails(handle)) return abi::kSystemError;
  return device().controlChannel().sendSetUp(setUpRail(0), connectSend_, control(), *this,
                                             handle.listenerId, wire::ControlKind::kConnect,
                                             &message, sizeof(message));
}

void SendComm::onControlComplete(Operation& op, size_t length) {
  if (closed() || state_ == State::kFailed) return;
  connectSent_ = true;
  updateState();
}

void SendComm::onControlMessage(wire::ControlKind kind, const uint8_t* data, size_t length,
                                size_t rail) {
  if (kind == wire::ControlKind::kProtocol) {
    if (state_ == State::kReady) device().protocol().onProtocolMessage(*this, data, length);
    return;
  }
  if (kind == wire::ControlKind::kClosed) {
    // The receiver is gone for good: what waits for it fails now rather than at a timeout.
    // Writes in flight are not failed: the receiver may have taken them before it closed.
    failUnposted("the receiver closed the connection");
    device().protocol().onPeerClosed(*this);
    return;
  }
  if (kind != wire::ControlKind::kAccept || state_ != State::kConnecting || acceptReceived_) return;
  wire::AcceptMessage message;
  std::string reason;
  if (!wire::decodeAcceptMessage(data, length, id(), &message, &reason)) {
    NNF_WARN("connection of comm %u failed: invalid accept message: %s", id(), reason.c_str());
    state_ = State::kFailed;
    return;
  }
  if (message.protocol != static_cast<uint32_t>(device().protocol().id())) {
    NNF_WARN(
        "connection of comm %u failed: the receiver runs another data protocol than %s (set "
        "NCCL_FABRIC_PROTOCOL alike on every rank)",
        id(), device().protocol().name());
    state_ = State::kFailed;
    return;
  }
  if (!adoptPeerRails(message.rails, "the receiver")) {
    state_ = State::kFailed;
    return;
  }
  remoteId_ = message.recvCommId;
  setPeerIdentity(message.pid, message.hostId);
  acceptReceived_ = true;
  updateState();
}

void SendComm::updateState() {
  if (connectSent_ && acceptReceived_) state_ = State::kReady;
}

void SendComm::onControlError(Operation& op, int error, const char* text) {
  if (closed()) return;
  // A rail that broke under it: again on another of the listener's rails (the listener takes a
  // connect message once, should the first have arrived after all).
  if (device().controlChannel().sendAgain(op, control(), *this, error)) return;
  NNF_WARN("connection of comm %u failed while sending the connect message: %s (%s)", id(),
           fi_strerror(error), text != nullptr ? text : "");
  state_ = State::kFailed;
}

}  // namespace nnf::core
