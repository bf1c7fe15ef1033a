// How a comm's data moves. The core handles connections, requests and completions; a protocol
// decides which libfabric operations carry a send or a grouped receive, and keeps whatever
// per-comm state it needs in a CommState the comm owns. Each device has its own Protocol object,
// which holds what the protocol keeps per device; core gets it from the ProtocolFactory that the
// plugin's assembly (src/abi/assembly.cc) passes in, and never names a concrete protocol.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "memory/region.h"
#include "nccl_net/types.h"

namespace nnf::core {
class Device;
struct DeviceSpec;
class DataComm;
class SendComm;
class RecvComm;
struct Request;
struct Operation;
struct MemoryHandle;
}  // namespace nnf::core

namespace nnf::protocol {

// Identifies the protocol in connect and accept messages: both ends must run the same.
enum class ProtocolId : uint16_t { kSendRecv = 1, kRdma = 2 };

// A protocol's own state in one comm (destroyed with the comm).
class CommState {
 public:
  virtual ~CommState() = default;
};

// What the connect message carries for the protocol (the sender's descriptor ring).
struct ConnectInfo {
  uint64_t ringAddress = 0;
  uint64_t ringKey = 0;                               // on the leader rail
  uint64_t ringRailKeys[memory::kMaxRails - 1] = {};  // on rails 1.. (0: none)
};

// What a protocol may change of the device it is set up on (while the device is built).
class DeviceSetup {
 public:
  virtual ~DeviceSetup() = default;
  // Lowers the largest message one send or receive may carry (DeviceProperties::maxMessageBytes).
  virtual void limitMessageBytes(size_t bytes) = 0;
};

class Protocol {
 public:
  virtual ~Protocol() = default;
  virtual const char* name() const = 0;
  virtual ProtocolId id() const = 0;

  // --- the device's life (device lock not needed: the device is not shared yet, or going) ---

  // The device's memory registry is up: allocate what the protocol keeps per device.
  virtual void startDevice(core::Device& device) {}
  // The device is going: close the registrations of what the protocol keeps per device, before
  // the domain goes (the memory stays until the protocol is destroyed, after the comms).
  virtual void releaseDevice() {}

  // Fill and post the operations of `request` (device lock held). On failure nothing stays
  // posted for this request and the result says why.
  virtual abi::Result postSend(core::SendComm& comm, core::Request& request, void* data,
                               size_t size, int tag, core::MemoryHandle* handle) = 0;
  virtual abi::Result postRecv(core::RecvComm& comm, core::Request& request, int count,
                               void* const* data, const size_t* sizes, const int* tags,
                               core::MemoryHandle* const* handles) = 0;

  // --- hooks for protocols with state of their own (device lock held); defaults do nothing ---

  // A send comm is about to send its connect message: set up and describe its state.
  virtual abi::Result startSend(core::SendComm& comm, ConnectInfo* info) { return abi::kSuccess; }
  // A receive comm accepts a sender that described itself with `info`.
  virtual abi::Result startRecv(core::RecvComm& comm, const ConnectInfo& info) {
    return abi::kSuccess;
  }
  // A completion with remote CQ data and no posted operation (an RMA write of the peer), read
  // from rail `rail`'s completion queue.
  virtual void onRemoteWrite(core::Device& device, size_t rail, uint64_t data, size_t length) {}
  // An error completion with no operation of ours behind it and remote CQ data: a peer's write
  // into this device failed here (EFA reports those with a NULL context). `data` names whom it
  // was for; true when the protocol found the comm and failed it.
  virtual bool onRemoteWriteError(core::Device& device, uint64_t data, const char* why) {
    return false;
  }
  // A comm's own operation (not a request's) completed or failed: true when it was ours.
  virtual bool onOwnCompletion(core::DataComm& comm, core::Operation& op, int error) {
    return false;
  }
  // A request's write completed: true when the protocol posted it again (the next segment), so
  // the request is not done yet.
  virtual bool continueWrite(core::DataComm& comm, core::Operation& op) { return false; }
  // A request's write failed with `error` (the device has judged its rail): true when the
  // protocol takes it over (it will post it again, or complete it, later), so the request stays
  // pending; false: the request fails.
  virtual bool onWriteFailed(core::DataComm& comm, core::Operation& op, int error) { return false; }
  // A message of the protocol's own from the connected peer (wire::ControlKind::kProtocol).
  virtual void onProtocolMessage(core::DataComm& comm, const uint8_t* data, size_t length) {}
  // The comm's own operations still with the provider.
  virtual int ownInFlight(const core::DataComm& comm) const { return 0; }
  // Each of the comm's own operations, with the provider or not.
  virtual void forEachOwn(core::DataComm& comm,
                          const std::function<void(core::Operation&)>& visit) {}
  virtual void cancelOwn(core::DataComm& comm) {}
  // The comm is closing (after cancelOwn): tell the peer what it must know.
  virtual void onClose(core::DataComm& comm) {}
  // Writes the peer may still make into the comm's buffers (closing waits for them).
  virtual int peerWritesPending(const core::DataComm& comm) const { return 0; }
  // Control messages of the protocol: the receiver closed (at the send comm), and the sender's
  // answer that nothing more will be written (at the receive comm).
  virtual void onPeerClosed(core::DataComm& comm) {}
  virtual void onPeerClosedAck(core::DataComm& comm, const uint8_t* data, size_t length) {}
  // A read of one of the comm's receive requests ended (`error` 0: completed): true when it was
  // the protocol's (rdma: an eager message copied into GPU memory), its size then set.
  virtual bool onRequestRead(core::DataComm& comm, core::Operation& op, int error) { return false; }
  // A read of the protocol's into a receive (see onRequestRead) goes again through rail `rail`
  // (its own failed on a broken one): true once `op`'s descriptor and remote key name that
  // rail's registrations; false when it is none of the protocol's reads.
  virtual bool readOn(core::DataComm& comm, core::Operation& op, size_t rail) { return false; }
  // A write of one of the comm's requests completed or failed.
  virtual void onWriteDone(core::DataComm& comm) {}
  // NCCL tested a request of the comm that has been pending for `waitedNs` (every 64th test).
  virtual void onWaiting(core::DataComm& comm, core::Request& request, uint64_t waitedNs) {}
  // A request of the comm failed or is given up: forget whatever refers to it.
  virtual void forget(core::DataComm& comm, core::Request& request) {}
  // The device is going: end the uses of memory registrations the comm's state holds.
  virtual void releaseRegistrations(core::DataComm& comm) {}
};

// Makes each device's protocol. Passed in by the plugin's assembly; core calls it once a device,
// after the device's rails are open.
class ProtocolFactory {
 public:
  virtual ~ProtocolFactory() = default;
  // The protocol `spec` asks for on `device`, which it may narrow through `setup`. Throws
  // std::runtime_error when the protocol cannot run there (construction only).
  virtual std::unique_ptr<Protocol> create(core::Device& device, const core::DeviceSpec& spec,
                                           DeviceSetup& setup) const = 0;
};

}  // namespace nnf::protocol
