#include "protocol/rdma_recv_recovery.h"

#include <cstring>

#include "core/device.h"
#include "core/wire.h"
#include "log/log.h"

namespace nnf::protocol::rdma {

RecvRecovery::RecvRecovery(core::RecvComm& comm, const ArenaSlot& staging, RecvSlots& slots)
    : comm_(comm), staging_(staging), slots_(slots) {
  answer_.owner = &comm;
}

void RecvRecovery::onMessage(const uint8_t* data, size_t length) {
  RailQuery query;
  if (length < sizeof(query)) return;
  memcpy(&query, data, sizeof(query));
  if (query.kind != static_cast<uint32_t>(RecoveryKind::kQuery)) return;
  if (answerPending()) {
    waiting_ = query;
    hasWaiting_ = true;
    return;
  }
  answer(query);
}

bool RecvRecovery::onOwnCompletion(core::Operation& op) {
  if (&op != &answer_) return false;
  if (hasWaiting_) {
    hasWaiting_ = false;
    answer(waiting_);
  }
  return true;
}

void RecvRecovery::answer(const RailQuery& query) {
  // The buffer the sender wrote into is the one its descriptor named only while the slot still
  // serves that group: (tag, sequence number) tell a later group in the same slot apart, which
  // the slot can only serve once this buffer ended (its original landed after all).
  bool resend = false;
  if (query.slot < kSlots && query.index < kGroup && slots_.requestAt(query.slot) != nullptr) {
    const BufferDescriptor& described = slots_.entries(query.slot)[query.index];
    SlotProgress& progress = slots_.progress(query.slot);
    resend = query.index < progress.groupSize() && described.tag == query.tag &&
             described.seq == static_cast<uint16_t>(query.seq) &&
             progress.resetRail(query.index, query.rail, query.shareBytes, query.segmentBytes);
  }
  RailAnswer answer{static_cast<uint32_t>(RecoveryKind::kAnswer),
                    query.slot,
                    query.index,
                    query.rail,
                    resend ? 1u : 0u,
                    0};
  NNF_INFO(abi::kLogSubsysNet,
           "comm %u: the sender's write on rail %u to slot %u buffer %u failed; %s", comm_.id(),
           query.rail, query.slot, query.index,
           resend ? "its share is written again on another rail" : "the buffer has ended already");
  uint8_t* buffer = staging_->data + kRecoveryOffset;
  abi::Result sent = comm_.device().controlChannel().send(
      answer_, buffer, staging_->desc, comm_.peer(), comm_.remoteId(),
      core::wire::ControlKind::kProtocol, &answer, sizeof(answer));
  if (sent != abi::kSuccess && !warned_) {
    // The sender's request then waits until its stall checks give it up.
    warned_ = true;
    NNF_WARN("comm %u: cannot answer the sender's question about a write on a failed rail",
             comm_.id());
  }
}

}  // namespace nnf::protocol::rdma
