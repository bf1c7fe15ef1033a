// The sender's side of an rdma comm (protocol/rdma.h): the descriptor ring the receiver writes
// into, the matching of sends and descriptors by (tag, sequence number), and the objects that
// carry a message (Striper, EagerSender) and close the comm (SenderClose).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/memory_handle.h"
#include "core/operation.h"
#include "core/protocol.h"
#include "core/request.h"
#include "core/send_comm.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_device.h"
#include "protocol/rdma_eager_sender.h"
#include "protocol/rdma_matching.h"
#include "protocol/rdma_send_close.h"
#include "protocol/rdma_send_recovery.h"
#include "protocol/rdma_striping.h"

namespace nnf::protocol::rdma {

class Sender final : public CommState {
 public:
  Sender(core::SendComm& comm, RdmaDevice& rdma);

  // Takes the comm's descriptor ring and describes it for the connect message; false when none
  // could be had (logged by the arena).
  bool start(ConnectInfo* info);
  abi::Result postSend(core::Request& request, void* data, size_t size, int tag,
                       core::MemoryHandle* handle);
  // A group of `count` descriptors landed in the ring entry of `slot`.
  void onDescriptors(uint32_t slot, uint32_t count);
  // Descriptors that came before their sends (tests: none is left once every send was posted).
  size_t descriptorsWaiting() const { return matcher_.descriptorsHeld(); }
  const SendRecovery& recovery() const { return recovery_; }
  // A credit write landed: entries freed so far, modulo 256.
  void onCredits(uint32_t freedMod256);

  bool onOwnCompletion(core::Operation& op, int error);
  bool continueWrite(core::Operation& op);
  // A data write failed: true when the share is in doubt and recovered (SendRecovery).
  bool onWriteFailed(core::Operation& op, int error) { return recovery_.onWriteFailed(op, error); }
  void onProtocolMessage(const uint8_t* data, size_t length) {
    // An eager message settled: small sends that waited meanwhile may go eagerly again.
    if (recovery_.onMessage(data, length)) sendWaitingEagerly();
    eager_.postVoids();  // a void in doubt that had landed lets its operation go
    onWriteDone();       // and a close answer may have waited for it
  }
  int ownInFlight();
  // Each of our own operations (not a request's): the device takes back those a provider holds
  // for a peer it is about to forget.
  void forEachOwn(const std::function<void(core::Operation&)>& visit);
  void onClose();
  void onPeerClosed();
  void onWriteDone();
  void onWaiting(uint64_t waitedNs);
  void forget(core::Request& request);

 private:
  // The send in `request` found its descriptor: its writes start.
  void write(core::Request& request, const Arrived& arrived, const BufferDescriptor& buffer,
             core::MemoryHandle* handle);
  void wait(core::Request& request, int32_t tag, uint16_t seq, core::MemoryHandle* handle);
  bool takeWaitingHandle(core::Request& request, core::MemoryHandle** handle);
  void answerDescriptor(uint32_t slot, uint32_t index, const BufferDescriptor& buffer);
  void sendWaitingEagerly();
  const BufferDescriptor* entries(uint32_t slot) const {
    return reinterpret_cast<const BufferDescriptor*>(ring_->data + entryOffset(slot));
  }

  core::SendComm& comm_;
  ArenaSlot ring_;  // our close answer, the eager grant and headers, the descriptors
  SendMatcher matcher_;
  SenderClose close_;
  Striper striper_;
  EagerSender eager_;
  SendRecovery recovery_;
  uint32_t generations_[kSlots] = {};  // each slot's last group taken (BufferDescriptor)
  bool warnedReleased_ = false;        // one WARN a comm for sends whose buffer was deregistered
};

}  // namespace nnf::protocol::rdma
