#include "core/control_channel.h"

#include <rdma/fi_errno.h>

#include <cstring>

#include "core/comm.h"
#include "core/data_comm.h"
#include "core/device.h"
#include "log/log.h"

namespace nnf::core {

ControlChannel::ControlChannel(Device& device, size_t receives) : device_(device) {
  entries_.reserve(receives * device.railCount());
  for (size_t r = 0; r < device.railCount(); ++r) {
    for (size_t i = 0; i < receives; ++i) {
      entries_.push_back(std::make_unique<Entry>());
      entries_.back()->rail = static_cast<uint8_t>(r);
    }
  }
}

ControlChannel::~ControlChannel() {
  // The device closes its endpoint first: the buffers are no longer the provider's.
  for (auto& entry : entries_) device_.controlArena().release(&entry->slot);
}

bool ControlChannel::start() {
  for (auto& entry : entries_) {
    Operation& op = entry->op;
    if (op.inFlight || op.queued) continue;  // posted by an earlier, partly failed start
    if (entry->slot.data == nullptr && !device_.controlArena().acquire(&entry->slot)) {
      return false;  // logged
    }
    op.owner = this;
    op.type = OpType::kControlRecv;
    op.rail = entry->rail;
    op.buffer = entry->slot.data;
    op.length = ControlSlot::kSize;
    op.desc = entry->slot.descOf(entry->rail);
    if (device_.post(op) != abi::kSuccess) {
      NNF_WARN("device %d: cannot post its %zu control receives", device_.index(), entries_.size());
      return false;
    }
  }
  return true;
}

abi::Result ControlChannel::send(Operation& op, uint8_t* buffer, void* desc, fi_addr_t peer,
                                 uint32_t remoteId, wire::ControlKind kind, const void* payload,
                                 size_t length) {
  return sendOn(0, op, buffer, desc, peer, remoteId, kind, payload, length);
}

abi::Result ControlChannel::sendOn(size_t rail, Operation& op, uint8_t* buffer, void* desc,
                                   fi_addr_t peer, uint32_t remoteId, wire::ControlKind kind,
                                   const void* payload, size_t length) {
  if (length > kMaxPayload) {
    NNF_WARN("device %d: a %zu-byte control message exceeds %zu bytes", device_.index(), length,
             kMaxPayload);
    return abi::kInternalError;
  }
  wire::ControlHeader header = wire::makeControlHeader(remoteId, kind, length);
  memcpy(buffer, &header, sizeof(header));
  if (length > 0) memcpy(buffer + sizeof(header), payload, length);
  op.type = OpType::kControlSend;
  op.rail = static_cast<uint8_t>(rail);
  op.buffer = buffer;
  op.length = sizeof(header) + length;
  op.desc = desc;
  op.peer = peer;
  return device_.post(op);
}

abi::Result ControlChannel::send(Operation& op, uint8_t* buffer, const ControlSlot& slot,
                                 const DataComm& comm, wire::ControlKind kind, const void* payload,
                                 size_t length) {
  size_t rail = device_.railHealth().firstUp(comm.rails(), comm.pathsDown());
  return sendVia(rail, op, buffer, slot, comm, kind, payload, length);
}

abi::Result ControlChannel::sendVia(size_t rail, Operation& op, uint8_t* buffer,
                                    const ControlSlot& slot, const DataComm& comm,
                                    wire::ControlKind kind, const void* payload, size_t length) {
  return sendOn(rail, op, buffer, slot.descOf(rail), comm.peer(rail), comm.remoteId(), kind,
                payload, length);
}

abi::Result ControlChannel::sendSetUp(size_t rail, Operation& op, const ControlSlot& slot,
                                      const DataComm& comm, uint32_t remoteId,
                                      wire::ControlKind kind, const void* payload, size_t length) {
  return sendOn(rail, op, slot.data, slot.descOf(rail), comm.peer(rail), remoteId, kind, payload,
                length);
}

bool ControlChannel::sendAgain(Operation& op, const ControlSlot& slot, const DataComm& comm,
                               int error) {
  int rail = device_.railHealth().railInsteadOf(op.rail, error, comm.rails(), comm.pathsDown());
  if (rail < 0) return false;
  NNF_INFO(abi::kLogSubsysNet,
           "comm %u: a control message failed with rail %u; sent again on rail %d", comm.id(),
           op.rail, rail);
  op.rail = static_cast<uint8_t>(rail);
  op.desc = slot.descOf(rail);
  op.peer = comm.peer(rail);
  return device_.post(op) == abi::kSuccess;
}

void ControlChannel::repost(Entry& entry) {
  if (device_.post(entry.op) == abi::kSuccess || warned_) return;
  // One receive fewer; the others keep the device reachable.
  warned_ = true;
  NNF_WARN("device %d: a control receive could not be posted again", device_.index());
}

namespace {
// What a closing comm still needs to hear: the two ends of the rdma protocol's close handshake,
// and the protocol's answers about writes its close may be waiting for.
bool closingKind(uint32_t kind) {
  return kind == static_cast<uint32_t>(wire::ControlKind::kClosed) ||
         kind == static_cast<uint32_t>(wire::ControlKind::kClosedAck) ||
         kind == static_cast<uint32_t>(wire::ControlKind::kProtocol);
}
}  // namespace

void ControlChannel::onComplete(Operation& op, size_t length) {
  Entry& entry = *recordOf<Entry>(op);
  wire::ControlHeader header;
  std::string reason;
  if (!wire::decodeControlHeader(entry.slot.data, length, &header, &reason)) {
    NNF_WARN("device %d: dropped a control message: %s", device_.index(), reason.c_str());
  } else if (Comm* comm = device_.findComm(header.commId);
             comm != nullptr && (!comm->closed() || closingKind(header.kind))) {
    comm->onControlMessage(static_cast<wire::ControlKind>(header.kind),
                           entry.slot.data + sizeof(header), header.length, entry.rail);
  } else {
    NNF_TRACE("device %d: dropped a control message for comm %u, not open", device_.index(),
              header.commId);
  }
  repost(entry);
}

void ControlChannel::onError(Operation& op, int error, size_t overflow, const char* text) {
  Entry& entry = *recordOf<Entry>(op);
  if (error == FI_ECANCELED) return;  // the device is closing
  if (error == FI_ETRUNC) {
    NNF_WARN("device %d: dropped a control message of more than %zu bytes", device_.index(),
             ControlSlot::kSize - 1);
  } else {
    NNF_WARN("device %d: receiving a control message failed: %s (%s)", device_.index(),
             fi_strerror(error), text != nullptr ? text : "");
  }
  repost(entry);
}

}  // namespace nnf::core
