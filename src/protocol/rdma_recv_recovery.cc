#include "protocol/rdma_recv_recovery.h"

#include <cstring>

#include "core/device.h"
#include "core/wire.h"
#include "log/log.h"

namespace nnf::protocol::rdma {

RecvRecovery::RecvRecovery(core::RecvComm& comm, const ArenaSlot& staging, RecvSlots& slots,
                           const EagerReceiver& eager)
    : comm_(comm), staging_(staging), slots_(slots), eager_(eager) {
  answer_.owner = &comm;
}

void RecvRecovery::onMessage(const uint8_t* data, size_t length) {
  RailQuery query;
  if (length < sizeof(query)) return;
  memcpy(&query, data, sizeof(query));
  if (query.kind != static_cast<uint32_t>(RecoveryKind::kQuery) &&
      query.kind != static_cast<uint32_t>(RecoveryKind::kEagerQuery) &&
      query.kind != static_cast<uint32_t>(RecoveryKind::kVoidQuery)) {
    return;
  }
  if (answerPending()) {
    waiting_ = query;
    hasWaiting_ = true;
    return;
  }
  answer(query);
}

bool RecvRecovery::onOwnCompletion(core::Operation& op, int error) {
  if (&op != &answer_) return false;
  // Its rail broke: the same answer goes again on another (the sender takes one per question).
  if (error != 0 && comm_.device().controlChannel().sendAgain(answer_, *staging_, comm_, error)) {
    return true;
  }
  if (hasWaiting_) {
    hasWaiting_ = false;
    answer(waiting_);
  }
  return true;
}

bool RecvRecovery::waitsForData(const RailQuery& query) {
  // The buffer the sender wrote into is the one its descriptor named only while the slot still
  // serves that group: (tag, sequence number) tell a later group in the same slot apart, which
  // the slot can only serve once this buffer ended (its original landed after all).
  if (query.slot >= kSlots || query.index >= kGroup || slots_.requestAt(query.slot) == nullptr) {
    return false;
  }
  const BufferDescriptor& described = slots_.entries(query.slot)[query.index];
  SlotProgress& progress = slots_.progress(query.slot);
  return query.index < progress.groupSize() && described.tag == query.tag &&
         described.seq == static_cast<uint16_t>(query.seq) &&
         progress.resetRail(query.index, query.rail);
}

bool RecvRecovery::waitsForEager(const RailQuery& query) const {
  // The entry cannot have moved on past the message in doubt: the sender writes its next
  // generation only once this one was freed here, which needs it to have landed.
  return query.slot < kEagerEntries && !eager_.tookGeneration(query.slot, query.index);
}

void RecvRecovery::answer(const RailQuery& query) {
  bool eager = query.kind == static_cast<uint32_t>(RecoveryKind::kEagerQuery);
  bool isVoid = query.kind == static_cast<uint32_t>(RecoveryKind::kVoidQuery);
  bool resend = eager ? waitsForEager(query) : isVoid ? waitsForVoid(query) : waitsForData(query);
  RecoveryKind kind = eager    ? RecoveryKind::kEagerAnswer
                      : isVoid ? RecoveryKind::kVoidAnswer
                               : RecoveryKind::kAnswer;
  // The rails the buffer ignores now: the shares go again on none of them.
  uint32_t ignored =
      resend && !eager && !isVoid ? slots_.progress(query.slot).ignoredRails(query.index) : 0;
  RailAnswer answer{
      static_cast<uint32_t>(kind), query.slot, query.index, query.rail, resend ? 1u : 0u, ignored};
  if (eager) {
    NNF_INFO(abi::kLogSubsysNet,
             "comm %u: the sender's eager message on rail %u into bounce entry %u failed; %s",
             comm_.id(), query.rail, query.slot,
             resend ? "it is written again on another rail" : "it had landed");
  } else if (isVoid) {
    NNF_INFO(abi::kLogSubsysNet,
             "comm %u: the sender's void on rail %u for slot %u buffer %u failed; %s", comm_.id(),
             query.rail, query.slot, query.index,
             resend ? "it is written again on another rail" : "it had landed");
  } else {
    NNF_INFO(
        abi::kLogSubsysNet,
        "comm %u: the sender's write on rail %u to slot %u buffer %u failed; %s", comm_.id(),
        query.rail, query.slot, query.index,
        resend ? "its share is written again on another rail" : "the buffer has ended already");
  }
  uint8_t* buffer = staging_->data + kRecoveryOffset;
  abi::Result sent = comm_.device().controlChannel().send(answer_, buffer, *staging_, comm_,
                                                          core::wire::ControlKind::kProtocol,
                                                          &answer, sizeof(answer));
  if (sent != abi::kSuccess && !warned_) {
    // The sender's request then waits until its stall checks give it up.
    warned_ = true;
    NNF_WARN("comm %u: cannot answer the sender's question about a write on a failed rail",
             comm_.id());
  }
}

}  // namespace nnf::protocol::rdma
