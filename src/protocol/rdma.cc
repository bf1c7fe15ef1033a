#include "protocol/rdma.h"

#include "core/device.h"
#include "core/recv_comm.h"
#include "core/send_comm.h"
#include "log/log.h"
#include "protocol/rdma_receiver.h"
#include "protocol/rdma_sender.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol {
namespace {

// The comm's rdma side, or null: a comm of the other kind, or one not set up yet.
rdma::Sender* senderOf(const core::DataComm& comm) {
  if (comm.kind() != core::Comm::Kind::kSend) return nullptr;
  return static_cast<rdma::Sender*>(comm.protocolState());
}
rdma::Receiver* receiverOf(const core::DataComm& comm) {
  if (comm.kind() != core::Comm::Kind::kRecv) return nullptr;
  return static_cast<rdma::Receiver*>(comm.protocolState());
}

}  // namespace

abi::Result Rdma::startSend(core::SendComm& comm, ConnectInfo* info) {
  auto sender = std::make_unique<rdma::Sender>(comm, device_);
  if (!sender->start(info)) return abi::kSystemError;  // logged by the arena
  comm.setProtocolState(std::move(sender));
  return abi::kSuccess;
}

abi::Result Rdma::startRecv(core::RecvComm& comm, const ConnectInfo& info) {
  auto receiver = std::make_unique<rdma::Receiver>(comm, device_);
  if (!receiver->start(info)) return abi::kSystemError;
  comm.setProtocolState(std::move(receiver));
  return abi::kSuccess;
}

// postSend and postRecv, the data path's entries, are in rdma_sender.cc and rdma_receiver.cc,
// where the side's code inlines into them.

void Rdma::onRemoteWrite(core::Device& device, size_t rail, uint64_t data, size_t length) {
  rdma::Immediate imm = rdma::decode(data);
  core::Comm* comm = device.findComm(imm.commId);
  if (comm == nullptr || comm->kind() == core::Comm::Kind::kListen) return;  // closed meanwhile
  auto& dataComm = static_cast<core::DataComm&>(*comm);
  if (imm.kind == rdma::ImmKind::kDescriptors || imm.kind == rdma::ImmKind::kCredits) {
    rdma::Sender* sender = senderOf(dataComm);
    if (sender == nullptr || comm->closed()) return;
    if (imm.kind == rdma::ImmKind::kCredits) {
      sender->onCredits(imm.count);
    } else {
      sender->onDescriptors(imm.slot, imm.count);
    }
    return;
  }
  rdma::Receiver* receiver = receiverOf(dataComm);
  // The sender's NIC there is alive: a witness for the receive comm's own writes on other rails.
  if (dataComm.rails() > 1) dataComm.silence().landed(rail);
  if (receiver == nullptr || receiver->onWrite(rail, imm, length)) return;
  if (!comm->closed() && !warnedStray_) {
    warnedStray_ = true;
    NNF_WARN("comm %u: a write for request slot %u, buffer %u that no receive expects", comm->id(),
             imm.slot, imm.index);
  }
}

bool Rdma::onOwnCompletion(core::DataComm& comm, core::Operation& op, int error) {
  if (rdma::Sender* sender = senderOf(comm)) return sender->onOwnCompletion(op, error);
  if (rdma::Receiver* receiver = receiverOf(comm)) return receiver->onOwnCompletion(op, error);
  return false;
}

bool Rdma::onWriteFailed(core::DataComm& comm, core::Operation& op, int error) {
  rdma::Sender* sender = senderOf(comm);
  return sender != nullptr && sender->onWriteFailed(op, error);
}

void Rdma::onProtocolMessage(core::DataComm& comm, const uint8_t* data, size_t length) {
  if (rdma::Sender* sender = senderOf(comm)) sender->onProtocolMessage(data, length);
  if (rdma::Receiver* receiver = receiverOf(comm)) receiver->onProtocolMessage(data, length);
}

bool Rdma::continueWrite(core::DataComm& comm, core::Operation& op) {
  rdma::Sender* sender = senderOf(comm);
  return sender != nullptr && sender->continueWrite(op);
}

bool Rdma::onRequestRead(core::DataComm& comm, core::Operation& op, int error) {
  rdma::Receiver* receiver = receiverOf(comm);
  return receiver != nullptr && receiver->onRequestRead(op, error);
}

bool Rdma::readOn(core::DataComm& comm, core::Operation& op, size_t rail) {
  rdma::Receiver* receiver = receiverOf(comm);
  return receiver != nullptr && receiver->readOn(op, rail);
}

void Rdma::onWaiting(core::DataComm& comm, core::Request& request, uint64_t waitedNs) {
  if (rdma::Sender* sender = senderOf(comm)) sender->onWaiting(waitedNs);
  if (rdma::Receiver* receiver = receiverOf(comm)) receiver->onWaiting(request, waitedNs);
}

void Rdma::forget(core::DataComm& comm, core::Request& request) {
  if (rdma::Sender* sender = senderOf(comm)) sender->forget(request);
  if (rdma::Receiver* receiver = receiverOf(comm)) receiver->forget(request);
}

void Rdma::releaseRegistrations(core::DataComm& comm) {
  if (rdma::Receiver* receiver = receiverOf(comm)) receiver->releaseRegistrations();
}

int Rdma::ownInFlight(const core::DataComm& comm) const {
  if (rdma::Sender* sender = senderOf(comm)) return sender->ownInFlight();
  if (rdma::Receiver* receiver = receiverOf(comm)) return receiver->ownInFlight();
  return 0;
}

void Rdma::forEachOwn(core::DataComm& comm, const std::function<void(core::Operation&)>& visit) {
  if (rdma::Sender* sender = senderOf(comm)) sender->forEachOwn(visit);
  if (rdma::Receiver* receiver = receiverOf(comm)) receiver->forEachOwn(visit);
}

void Rdma::cancelOwn(core::DataComm& comm) {
  if (rdma::Receiver* receiver = receiverOf(comm)) receiver->cancelOwn();
}

void Rdma::onClose(core::DataComm& comm) {
  if (rdma::Sender* sender = senderOf(comm)) sender->onClose();
  if (rdma::Receiver* receiver = receiverOf(comm)) receiver->onClose();
}

int Rdma::peerWritesPending(const core::DataComm& comm) const {
  rdma::Receiver* receiver = receiverOf(comm);
  return receiver != nullptr ? receiver->peerWritesPending() : 0;
}

void Rdma::onPeerClosed(core::DataComm& comm) {
  if (rdma::Sender* sender = senderOf(comm)) sender->onPeerClosed();
}

void Rdma::onPeerClosedAck(core::DataComm& comm, const uint8_t* data, size_t length) {
  if (rdma::Receiver* receiver = receiverOf(comm)) receiver->onPeerClosedAck(data, length);
}

void Rdma::onWriteDone(core::DataComm& comm) {
  if (rdma::Sender* sender = senderOf(comm)) sender->onWriteDone();
}

}  // namespace nnf::protocol
