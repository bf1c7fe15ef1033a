// The receiver's side of rail recovery (docs/failover.md, step 3; the messages in rdma_wire.h):
// answers the sender's question about a write that failed on a broken rail, after forgetting
// what landed of that rail's share when the buffer still waits for it; about an eager message
// that failed so, by whether its bounce entry took it; and about a void, by whether its buffer
// still waits for it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/operation.h"
#include "core/recv_comm.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_eager_receiver.h"
#include "protocol/rdma_recv_slots.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

class RecvRecovery {
 public:
  RecvRecovery(core::RecvComm& comm, const ArenaSlot& staging, RecvSlots& slots,
               const EagerReceiver& eager);
  RecvRecovery(const RecvRecovery&) = delete;
  RecvRecovery& operator=(const RecvRecovery&) = delete;

  // The sender's RailQuery (`length` bytes at `data`): answered now, or once the answer before
  // it has gone (the sender asks one question at a time, but may ask the next before our send of
  // the last answer completed here).
  void onMessage(const uint8_t* data, size_t length);
  // True when `op` was our answer (its send ended).
  bool onOwnCompletion(core::Operation& op, int error);
  bool answerPending() const { return answer_.inFlight || answer_.queued; }
  core::Operation& answer() { return answer_; }

 private:
  void answer(const RailQuery& query);
  // Whether the buffer (a data query) or the bounce entry (an eager one) still waits for what
  // the query names: then the sender writes it again.
  bool waitsForData(const RailQuery& query);
  bool waitsForEager(const RailQuery& query) const;
  bool waitsForVoid(const RailQuery& query) {
    return slots_.resetVoid(query.slot, query.index, query.tag, static_cast<uint16_t>(query.seq),
                            query.rail);
  }

  core::RecvComm& comm_;
  const ArenaSlot& staging_;
  RecvSlots& slots_;
  const EagerReceiver& eager_;
  core::Operation answer_;
  RailQuery waiting_{};
  bool hasWaiting_ = false;
  bool warned_ = false;
};

}  // namespace nnf::protocol::rdma
