// The receiver's side of the eager path (rdma_eager.h has the design): the bounce area and its
// grant, the messages that land in it and the receives they fill, the credits returned to the
// sender, and which receives may go undescribed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/memory_handle.h"
#include "core/operation.h"
#include "core/recv_comm.h"
#include "core/request.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_device.h"
#include "protocol/rdma_eager.h"
#include "protocol/rdma_eager_inbox.h"
#include "protocol/rdma_recv_close.h"
#include "protocol/rdma_recv_eager_mode.h"
#include "protocol/rdma_recv_slots.h"

namespace nnf::protocol::rdma {

class EagerReceiver {
 public:
  EagerReceiver(core::RecvComm& comm, RdmaDevice& rdma, const ArenaSlot& staging,
                const RemoteSlot& ring, RecvSlots& slots, ReceiverClose& close);
  EagerReceiver(const EagerReceiver&) = delete;
  EagerReceiver& operator=(const EagerReceiver&) = delete;

  // A receive of `count` buffers of `sizes` is being posted: the first one an entry could fill
  // after the comm's first message landed takes the bounce area and grants its entries.
  void onReceivePosted(int count, const size_t* sizes) {
    if (mode_.grantDue()) maybeGrant(count, sizes);
  }
  // A message landed by descriptor: later receives an entry could fill take the bounce area.
  void onMessageLanded() { mode_.onMessageLanded(); }
  // Whether a receive of `count` buffers can be filled by an eager message instead of its
  // descriptor: one host buffer that fits a bounce entry.
  bool fillable(int count, size_t size, const core::MemoryHandle* handle) const {
    return count == 1 && mode_.granted() && size <= payload_ && size <= senderMax_ &&
           (handle == nullptr || handle->type == memory::MemType::kHost);
  }
  // Whether the sender was told (kEagerAhead on the last group described) that small receives
  // go undescribed.
  bool aheadSaid() const { return mode_.aheadSaid(); }
  // A group was described; `small`: it said kEagerAhead.
  void onDescribed(bool small) { mode_.onDescribed(small); }
  // The held entry of (tag, seq), or kEagerEntries.
  uint32_t find(int32_t tag, uint16_t seq) { return inbox_.find(tag, seq); }

  // Copies the message in bounce `entry` into buffer `index` of `request` (memcpy, or an RDMA
  // read into GPU memory, which completes the buffer later) and frees the entry.
  void deliver(core::Request& request, uint32_t index, uint32_t entry, core::MemoryHandle* handle);
  // An eager message landed in `entry`; `implied`: its header, where it came without one;
  // `generation`: its generation in the entry, where the immediate says (kEager; -1: not said).
  // One whose generation the entry has taken already (written again after its rail failed, the
  // first write having landed after all) is left alone.
  void onLanded(uint32_t entry, const EagerHeader* implied = nullptr, int generation = -1);
  // Whether `entry` took the message of `generation` (modulo 4): the sender's question about an
  // eager write that failed on a down rail (rdma_recv_recovery.h).
  bool tookGeneration(uint32_t entry, uint32_t generation) const {
    return inbox_.took(entry, generation);
  }
  // The sender's answer to the grant (kEagerLimit): it sends messages up to `maxBytes` eagerly.
  void onLimit(size_t maxBytes);
  // Describes the undescribed receive of `slot` now, with kEagerAhead: the run of undescribed
  // small receives goes on, so the sender keeps sending small messages eagerly.
  void describeLate(uint32_t slot);
  // Our credit write ended: true when `op` was it.
  bool onCreditWriteDone(const core::Operation& op, int error);
  // A read of a receive's buffer ended: true when it copied an eager message into GPU memory.
  bool onRead(core::Operation& op, int error);
  // An eager message's copy into GPU memory goes again through rail `rail` (its own broke): its
  // descriptor and the bounce area's key there. False for any other read.
  bool readOn(core::Operation& op, size_t rail);
  // Whether `op` is a read copying an eager message into GPU memory (not a flush).
  bool copying(const core::Operation& op) const;
  // Whether the sender may still write into the bounce area of a closed comm (kept until it
  // answered, or past the close bound: then set aside for good).
  bool bounceExposed();
  bool creditWriteInFlight() const { return creditWrite_.inFlight; }
  core::Operation& creditWrite() { return creditWrite_; }

 private:
  void maybeGrant(int count, const size_t* sizes);
  bool grant();
  void sendCredits();
  void freeEntry(uint32_t entry);
  bool readHeader(uint32_t entry, const EagerHeader* implied, EagerHeader* header);
  uint8_t* entryData(uint32_t e) { return bounce_->data + bounceEntryOffset(e, payload_); }

  core::RecvComm& comm_;
  RdmaDevice& rdma_;
  const ArenaSlot& staging_;  // the grant, at kGrantOffset
  const RemoteSlot& ring_;    // the sender's ring, where credit writes go
  RecvSlots& slots_;
  ReceiverClose& close_;
  ArenaSlot bounce_;
  RecvEagerState mode_;
  size_t payload_ = 0;  // bytes of message an entry holds
  EagerInbox inbox_;
  // The tag of the last eager header read (its sender's next headerless message has it).
  bool headerSeen_ = false;
  int32_t lastHeaderTag_ = 0;
  core::Operation creditWrite_;
  uint64_t creditsReported_ = 0;  // entries freed as the sender last heard
  bool creditsOwed_ = false;      // a credit write is due once the one in flight completes
  // The largest message the sender sends eagerly, as it answered the grant (kEagerLimit; until
  // then, as large as an entry): a receive above it is described.
  size_t senderMax_ = ~size_t{0};
};

}  // namespace nnf::protocol::rdma
