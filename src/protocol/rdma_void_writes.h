// The sender's answers to descriptors whose messages went eagerly (rdma_eager.h, "Crossing"): a
// write of no bytes naming the slot and buffer, after which the receiver may reuse the slot.
// Taken with the receiver's grant (a comm that never sends eagerly holds none): a few
// operations, and the voids owed per slot (a bit per buffer) that wait for one of them. A void
// goes on the first rail up. One that fails with its rail is rail recovery's (SendRecovery): it
// may have landed, and a second landing could end a buffer of the slot's next group, so the
// receiver is asked whether the buffer still waits for it, and only then is it written again;
// meanwhile its operation is not reused (`segment.resent` set: the recovery holds it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/operation.h"
#include "core/send_comm.h"
#include "protocol/rdma_send_close.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

class VoidWriter {
 public:
  VoidWriter(core::SendComm& comm, SenderClose& close);
  VoidWriter(const VoidWriter&) = delete;
  VoidWriter& operator=(const VoidWriter&) = delete;

  // Buffer `index` of `slot` (described by `buffer`) needs no data: its message went eagerly.
  void owe(uint32_t slot, uint32_t index, const BufferDescriptor& buffer);
  // A void ended: true when `op` was one.
  bool onDone(core::Operation& op, int error);
  bool owns(const core::Operation& op) const { return &op >= ops_ && &op < ops_ + kOps; }
  // Posts owed voids on the operations free now (rail recovery let one go).
  void postOwed() {
    if (!close_.receiverDone()) post();
  }
  // Voids owed or with the provider (the close's answer waits for them).
  int pending() const;
  template <typename Visit>
  void forEachWrite(Visit&& visit) {
    for (core::Operation& op : ops_) visit(op);
  }

 private:
  void post();

  static constexpr size_t kOps = 4;
  core::SendComm& comm_;
  SenderClose& close_;
  core::Operation ops_[kOps];
  uint8_t owed_[kSlots] = {};
  uint32_t owedSlots_ = 0;         // bit s: owed_[s] != 0
  uint64_t address_[kSlots] = {};  // a buffer of the slot's group: where the empty write goes
  uint64_t keys_[kSlots][kMaxRails] = {};  // its key on each rail
  // The (tag, sequence number) each buffer's descriptor said: a void in doubt is named by them.
  int32_t tags_[kSlots][kGroup] = {};
  uint16_t seqs_[kSlots][kGroup] = {};
};

}  // namespace nnf::protocol::rdma
