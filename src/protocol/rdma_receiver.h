// The receiver's side of an rdma comm (protocol/rdma.h): its grouped receives, each described in
// a slot (RecvSlots) whose descriptors go into the sender's ring, the sender's writes landing in
// them, and the objects that receive eagerly (EagerReceiver) and close the comm (ReceiverClose).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/memory_handle.h"
#include "core/operation.h"
#include "core/protocol.h"
#include "core/recv_comm.h"
#include "core/request.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_device.h"
#include "protocol/rdma_eager_receiver.h"
#include "protocol/rdma_recv_close.h"
#include "protocol/rdma_recv_recovery.h"
#include "protocol/rdma_recv_slots.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

class Receiver final : public CommState {
 public:
  Receiver(core::RecvComm& comm, RdmaDevice& rdma);

  // Takes the comm's staging area and notes the sender's ring; false when no staging area could
  // be had (logged by the arena).
  bool start(const ConnectInfo& info);
  // kInProgress: no slot is free (NCCL retries the irecv).
  abi::Result postRecv(core::Request& request, int count, void* const* data, const size_t* sizes,
                       const int* tags, core::MemoryHandle* const* handles);
  // A write of the sender's landed on `rail` (`length` bytes as the completion says): false when
  // it was a segment no receive expects.
  bool onWrite(size_t rail, const Immediate& imm, size_t length);

  bool onOwnCompletion(core::Operation& op, int error);
  bool onRequestRead(core::Operation& op, int error);
  bool readOn(core::Operation& op, size_t rail) { return eager_.readOn(op, rail); }
  int ownInFlight();
  void forEachOwn(const std::function<void(core::Operation&)>& visit);
  void cancelOwn();
  void onClose();
  int peerWritesPending() const { return close_.peerWritesPending(); }
  void onPeerClosedAck(const uint8_t* data, size_t length) { close_.onAnswer(data, length); }
  // The sender's question about a write on a failed rail (RecvRecovery).
  void onProtocolMessage(const uint8_t* data, size_t length) { recovery_.onMessage(data, length); }
  void onWaiting(core::Request& request, uint64_t waitedNs);
  void forget(core::Request& request);
  void releaseRegistrations() { slots_.dropAllHandles(); }
  // Slots not free: with no receive pending, one still awaits a void that never came.
  uint32_t slotsTaken() const { return slots_.taken(); }

 private:
  // Each of our own operations: the close notice, the credit write, the recovery answer, the
  // slots' descriptor writes.
  template <typename Visit>
  void visitOwn(Visit&& visit) {
    visit(close_.notice());
    visit(eager_.creditWrite());
    visit(recovery_.answer());
    slots_.forEachWrite(visit);
  }
  // What staging a receive's buffers found: the eager messages here already, the registrations
  // described.
  struct Staged {
    uint64_t sizes[kGroup];
    core::MemoryHandle* described[kGroup];
    uint32_t eager[kGroup];  // the bounce entry holding its message, or kEagerEntries
    uint32_t settledMask;
    int settled;
  };
  uint32_t takeFreeSlot();
  abi::Result stage(core::Request& request, uint32_t slot, int count, void* const* data,
                    const size_t* sizes, const int* tags, core::MemoryHandle* const* handles,
                    Staged* staged);
  abi::Result stageBuffer(core::Request& request, int i, BufferDescriptor& entry, void* data,
                          size_t size, int tag, core::MemoryHandle* handle, Staged* staged);
  void deliverSettled(core::Request& request, int count, const Staged& staged,
                      core::MemoryHandle* const* handles);
  bool onSegment(size_t rail, const Immediate& imm, size_t length);
  bool writesIntoRingInFlight() const {
    return slots_.writesInFlight() || eager_.creditWriteInFlight();
  }

  core::RecvComm& comm_;
  RdmaDevice& rdma_;
  ArenaSlot staging_;  // the close notice, the grant, then the descriptors of each slot
  RemoteSlot ring_;    // the sender's descriptor ring
  RecvSlots slots_;
  ReceiverClose close_;
  EagerReceiver eager_;
  RecvRecovery recovery_;
};

}  // namespace nnf::protocol::rdma
