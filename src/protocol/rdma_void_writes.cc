#include "protocol/rdma_void_writes.h"

#include "core/device.h"
#include "protocol/rdma_own_write.h"

namespace nnf::protocol::rdma {

VoidWriter::VoidWriter(core::SendComm& comm, SenderClose& close) : comm_(comm), close_(close) {
  for (core::Operation& op : ops_) {
    op.owner = &comm;
    op.segment = core::WriteSegment{};  // not held by rail recovery
  }
}

void VoidWriter::owe(uint32_t slot, uint32_t index, const BufferDescriptor& buffer) {
  // After the receiver's close nothing is read any more: a failed send's descriptor may stay
  // unanswered too, nothing comes for that buffer either way.
  if (slot >= kSlots || index >= kGroup || close_.receiverDone()) return;
  owed_[slot] |= static_cast<uint8_t>(1u << index);
  owedSlots_ |= 1u << slot;
  tags_[slot][index] = buffer.tag;
  seqs_[slot][index] = buffer.seq;
  address_[slot] = buffer.address;
  for (size_t r = 0; r < kMaxRails; ++r) keys_[slot][r] = buffer.keys[r];
  // The receiver reuses the slot only after the void: a sender whose last send has ended may
  // not be called again before that receiver's next irecv needs the slot. The device's keeper
  // progresses what this posts, or holds back for want of a free operation, if nobody else does.
  post();
}

// Posts owed voids on the free operations.
void VoidWriter::post() {
  for (core::Operation& op : ops_) {
    if (owedSlots_ == 0) return;
    if (op.inFlight || op.queued || op.segment.resent != 0) continue;
    auto slot = static_cast<uint32_t>(__builtin_ctz(owedSlots_));
    auto index = static_cast<uint32_t>(__builtin_ctz(owed_[slot]));
    owed_[slot] &= static_cast<uint8_t>(~(1u << index));
    if (owed_[slot] == 0) owedSlots_ &= ~(1u << slot);
    op.request = nullptr;
    op.type = core::OpType::kWrite;
    size_t rail = ownWriteRail(comm_.device(), comm_);
    op.rail = static_cast<uint8_t>(rail);
    op.peer = comm_.peer(rail);
    op.buffer = nullptr;
    op.length = 0;
    op.desc = nullptr;
    op.headerLength = 0;
    op.remoteAddress = address_[slot];
    op.remoteKey = keys_[slot][rail];
    op.tag = encodeVoid(comm_.remoteId(), slot, index);
    op.segment = core::WriteSegment{0, tags_[slot][index], seqs_[slot][index], 0, 0};
    // A failure is the device's to log; one on a broken rail is rail recovery's (Sender).
    comm_.device().post(op);
  }
}

bool VoidWriter::onDone(core::Operation& op, int error) {
  if (!owns(op)) return false;
  op.segment.resent = 0;                       // a void written again by rail recovery ended too
  if (error == 0) close_.countWrite(op.rail);  // the receiver counts what lands
  if (!close_.receiverDone()) post();
  return true;
}

int VoidWriter::pending() const {
  int count = owedSlots_ != 0 && !close_.receiverDone() ? 1 : 0;
  for (const core::Operation& op : ops_) {
    // One rail recovery holds may be written again (unless the receiver is done reading).
    bool held = op.segment.resent != 0 && !close_.receiverDone();
    count += op.inFlight || op.queued || held ? 1 : 0;
  }
  return count;
}

}  // namespace nnf::protocol::rdma
