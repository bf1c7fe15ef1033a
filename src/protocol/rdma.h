// The rdma protocol: receiver-driven RMA writes. Each grouped receive writes its buffers'
// descriptors (address, size, key, NCCL tag and sequence number) into the sender's descriptor
// ring; each send waits for the descriptor of its (tag, sequence number) and writes the message
// straight into the receiver's buffer with fi_writedata. Nothing arrives that the receiver did
// not ask for (no unexpected messages, no provider buffering), and a message larger than its
// buffer is refused by the sender before a byte moves: the send fails and the receiver hears of
// it through a write of no bytes. Wire formats: protocol/rdma_wire.h.
//
// Rdma is the protocol's face to core: it finds the comm's side (rdma::Sender, rdma_sender.h,
// or rdma::Receiver, rdma_receiver.h: the comm's protocol state) and hands each hook to it.
#pragma once

#include "core/protocol.h"
#include "protocol/rdma_device.h"

namespace nnf::protocol {

class Rdma final : public Protocol {
 public:
  // One a device: what it keeps there is set up now (RdmaDevice), and at startDevice.
  Rdma(core::Device& device, DeviceSetup& setup) : device_(device, setup) {}
  const char* name() const override { return "rdma"; }
  ProtocolId id() const override { return ProtocolId::kRdma; }
  void startDevice(core::Device& device) override { device_.start(); }
  void releaseDevice() override { device_.release(); }
  abi::Result postSend(core::SendComm& comm, core::Request& request, void* data, size_t size,
                       int tag, core::MemoryHandle* handle) override;
  // kInProgress: the request's slot still has its previous descriptor write with the provider
  // (NCCL retries the irecv).
  abi::Result postRecv(core::RecvComm& comm, core::Request& request, int count, void* const* data,
                       const size_t* sizes, const int* tags,
                       core::MemoryHandle* const* handles) override;

  abi::Result startSend(core::SendComm& comm, ConnectInfo* info) override;
  abi::Result startRecv(core::RecvComm& comm, const ConnectInfo& info) override;
  void onRemoteWrite(core::Device& device, size_t rail, uint64_t data, size_t length) override;
  bool onWriteFailed(core::DataComm& comm, core::Operation& op, int error) override;
  void onProtocolMessage(core::DataComm& comm, const uint8_t* data, size_t length) override;
  bool onRemoteWriteError(core::Device& device, uint64_t data, const char* why) override;
  bool onOwnCompletion(core::DataComm& comm, core::Operation& op, int error) override;
  bool continueWrite(core::DataComm& comm, core::Operation& op) override;
  int ownInFlight(const core::DataComm& comm) const override;
  void forEachOwn(core::DataComm& comm,
                  const std::function<void(core::Operation&)>& visit) override;
  void cancelOwn(core::DataComm& comm) override;
  // A receive comm tells its sender (kClosed), whose waiting sends then fail instead of waiting.
  void onClose(core::DataComm& comm) override;
  int peerWritesPending(const core::DataComm& comm) const override;
  void onPeerClosed(core::DataComm& comm) override;
  void onPeerClosedAck(core::DataComm& comm, const uint8_t* data, size_t length) override;
  void onWriteDone(core::DataComm& comm) override;
  bool onRequestRead(core::DataComm& comm, core::Operation& op, int error) override;
  bool readOn(core::DataComm& comm, core::Operation& op, size_t rail) override;
  void onWaiting(core::DataComm& comm, core::Request& request, uint64_t waitedNs) override;
  void forget(core::DataComm& comm, core::Request& request) override;
  void releaseRegistrations(core::DataComm& comm) override;

 private:
  RdmaDevice device_;
  bool warnedStray_ = false;  // one WARN for writes that name no receive
};

}  // namespace nnf::protocol
