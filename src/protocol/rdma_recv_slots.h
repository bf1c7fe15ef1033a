// The receiver's descriptor slots (protocol/rdma.h): one a grouped receive in flight, each with
// its state (SlotLifecycle), the receive it serves, its buffers' accounting (SlotProgress), the
// registrations its buffers were described with, and the write that puts its descriptors into
// the sender's ring.
#pragma once

#include <cstdint>
#include <memory>

#include "core/memory_handle.h"
#include "core/memory_registry.h"
#include "core/operation.h"
#include "core/recv_comm.h"
#include "core/request.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_slot_lifecycle.h"
#include "protocol/rdma_slot_progress.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

class RecvSlots {
 public:
  RecvSlots(core::RecvComm& comm, const ArenaSlot& staging, const RemoteSlot& ring)
      : comm_(comm), staging_(staging), ring_(ring) {}
  // The comm goes once its sender acknowledged the close, died, or the close gave up: the
  // registrations NCCL deregistered meanwhile go too (a late write then fails at the provider
  // instead of landing in memory NCCL freed).
  ~RecvSlots() { dropAllHandles(); }
  RecvSlots(const RecvSlots&) = delete;
  RecvSlots& operator=(const RecvSlots&) = delete;

  // The lowest free slot whose last descriptor write has completed (allocating its chunk), or
  // kSlots when all are busy or memory ran out.
  uint32_t freeSlot() {
    for (uint32_t candidates = ~lifecycle_.busy(); candidates != 0; candidates &= candidates - 1) {
      auto slot = static_cast<uint32_t>(__builtin_ctz(candidates));
      if (!chunkOf(slot) && !allocateChunk(slot)) return kSlots;
      const core::Operation& op = write(slot);
      if (!op.inFlight && !op.queued) return slot;
    }
    return kSlots;
  }
  // The descriptors staged for `slot` (written into the sender's ring entry of the same slot).
  BufferDescriptor* entries(uint32_t slot) const {
    return reinterpret_cast<BufferDescriptor*>(staging_->data + entryOffset(slot));
  }
  // Free `slot` serves `request` from now: `count` buffers of `sizes` bytes, described with the
  // registrations `described` (null where none), those of `settledMask` filled already.
  // `describe`: its descriptors are written next (describe()); else they stay staged, its
  // message coming eagerly (it is described late if none came).
  void take(uint32_t slot, core::Request& request, uint32_t count, const uint64_t* sizes,
            core::MemoryHandle* const* described, uint32_t settledMask, bool describe) {
    lifecycle_.onTake(slot, describe);
    SlotProgress& buffers = progress(slot);
    buffers.arm(count, sizes);
    this->request(slot) = &request;
    core::MemoryHandle** handles = chunkOf(slot)->handles[slot % kSlotsPerChunk];
    for (uint32_t i = 0; i < count; ++i) {
      if ((settledMask & (1u << i)) != 0) buffers.settle(i);
      if (described[i] != nullptr) core::beginUse(described[i]);
      handles[i] = described[i];
    }
  }
  bool undescribed(uint32_t slot) const {
    return lifecycle_.state(slot) == SlotState::kUndescribed;
  }
  // Writes the slot's staged descriptors into the sender's ring.
  abi::Result describe(uint32_t slot);
  // Writes the staged descriptors of undescribed `slot` now.
  abi::Result describeLate(uint32_t slot) {
    lifecycle_.onDescribeLate(slot);
    return describe(slot);
  }
  // The descriptor write `op` of `slot` failed with `error`: when that says its rail broke and
  // another rail is up, it goes again there (true; the sender takes the group once).
  bool writeAgain(uint32_t slot, core::Operation& op, int error);
  // The descriptors of the request of `slot` could not be written: no data will come for it,
  // so the slot is released and the request fails as one of its buffers would.
  void failDescribing(uint32_t slot, int error);
  // The slot's request ended: the slot is free again, or, while the sender's voids for it are
  // still to come (it may not have read the slot's descriptors), waits for them without it.
  void finish(uint32_t slot) {
    request(slot) = nullptr;
    if (lifecycle_.onReceiveEnded(slot, progress(slot))) clear(slot);
  }
  // The slot's request failed or was given up: the slot is free at once.
  void release(uint32_t slot) {
    lifecycle_.onReleased(slot);
    clear(slot);
  }
  // The sender's void for buffer `index` of `slot` landed on `rail`.
  void onVoid(uint32_t slot, uint32_t index, size_t rail);
  // The sender's void for buffer `index` of `slot`, whose descriptor said (`tag`, `seq`), failed
  // on `rail` (a broken path): true when the buffer still waits for it (SlotProgress::resetVoid).
  // The slot cannot have moved on to another group meanwhile: it waits for that void.
  bool resetVoid(uint32_t slot, uint32_t index, int32_t tag, uint16_t seq, size_t rail);

  // The request a slot serves, or null (also for slots of chunks never allocated).
  core::Request* requestAt(uint32_t slot) const {
    Chunk* chunk = slot < kSlots ? chunkOf(slot) : nullptr;
    return chunk != nullptr ? chunk->requests[slot % kSlotsPerChunk] : nullptr;
  }
  SlotProgress& progress(uint32_t slot) { return chunkOf(slot)->progress[slot % kSlotsPerChunk]; }
  core::MemoryHandle* handle(uint32_t slot, uint32_t index) const {
    return chunkOf(slot)->handles[slot % kSlotsPerChunk][index];
  }
  // The described, unsettled buffer of (tag, seq): its slot and index, or false.
  bool findDescribed(int32_t tag, uint16_t seq, uint32_t* slot, uint32_t* index) const;
  // Whether a slot serves a request (buffers the sender may write into).
  bool anyServing() const;
  // Slots not free (serving a receive or awaiting its voids).
  uint32_t taken() const { return static_cast<uint32_t>(__builtin_popcount(lifecycle_.busy())); }
  // Whether a descriptor write is with the provider.
  bool writesInFlight() const;
  // The slot whose descriptor write `op` is, or kSlots.
  uint32_t slotOfWrite(const core::Operation& op) const;
  template <typename Visit>
  void forEachWrite(Visit&& visit) {
    for (const auto& chunk : chunks_) {
      if (!chunk) continue;
      for (core::Operation& op : chunk->descriptorWrites) visit(op);
    }
  }
  // Each undescribed slot, lowest first (a slot the visit describes is not visited again).
  template <typename Visit>
  void forEachUndescribed(Visit&& visit) {
    for (uint32_t waiting = lifecycle_.undescribed(); waiting != 0; waiting &= waiting - 1) {
      visit(static_cast<uint32_t>(__builtin_ctz(waiting)));
    }
  }
  // The registrations the slots' buffers were described with end their use (see dropHandles).
  void dropAllHandles();

 private:
  // Descriptor slots come in chunks allocated as receives first need them: most comms keep a
  // few receives in flight, and an idle one holds none.
  static constexpr uint32_t kSlotsPerChunk = 8;
  struct Chunk {
    core::Operation descriptorWrites[kSlotsPerChunk];
    core::Request* requests[kSlotsPerChunk] = {};
    SlotProgress progress[kSlotsPerChunk];
    // The registrations each slot's buffers were described with (see dropHandles).
    core::MemoryHandle* handles[kSlotsPerChunk][kGroup] = {};
    uint32_t generations[kSlotsPerChunk] = {};  // groups described in each slot so far
  };
  Chunk* chunkOf(uint32_t slot) const { return chunks_[slot / kSlotsPerChunk].get(); }
  core::Operation& write(uint32_t slot) {
    return chunkOf(slot)->descriptorWrites[slot % kSlotsPerChunk];
  }
  core::Request*& request(uint32_t slot) { return chunkOf(slot)->requests[slot % kSlotsPerChunk]; }
  // The slot's previous group ends: its buffers, its request, its registrations.
  void clear(uint32_t slot) {
    uint32_t described = progress(slot).groupSize();
    progress(slot).disarm();
    request(slot) = nullptr;
    dropHandles(slot, described);
  }
  void dropHandles(uint32_t slot, uint32_t count = kGroup);
  bool allocateChunk(uint32_t slot);

  core::RecvComm& comm_;
  const ArenaSlot& staging_;  // the descriptors are staged here (entryOffset)
  const RemoteSlot& ring_;    // the sender's ring, where they are written
  std::unique_ptr<Chunk> chunks_[kSlots / kSlotsPerChunk];
  SlotLifecycle lifecycle_;
};

}  // namespace nnf::protocol::rdma
