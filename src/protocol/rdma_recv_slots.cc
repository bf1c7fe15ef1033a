#include "protocol/rdma_recv_slots.h"

#include <rdma/fi_errno.h>

#include <new>

#include "core/device.h"
#include "log/log.h"
#include "protocol/rdma_own_write.h"

namespace nnf::protocol::rdma {

// A chunk for `slot` when it has none yet; false (logged) when memory ran out.
bool RecvSlots::allocateChunk(uint32_t slot) {
  std::unique_ptr<Chunk>& chunk = chunks_[slot / kSlotsPerChunk];
  chunk.reset(new (std::nothrow) Chunk);
  if (!chunk) {
    NNF_WARN("irecv: out of memory for the receive slots of comm %u", comm_.id());
    return false;
  }
  for (core::Operation& op : chunk->descriptorWrites) op.owner = &comm_;
  return true;
}

abi::Result RecvSlots::describe(uint32_t slot) {
  core::Operation& op = write(slot);
  core::Device& device = comm_.device();
  size_t rail = ownWriteRail(device, comm_);
  entries(slot)[0].generation = ++chunkOf(slot)->generations[slot % kSlotsPerChunk];
  op.request = nullptr;
  op.type = core::OpType::kWrite;
  op.headerLength = 0;
  op.buffer = staging_->data + entryOffset(slot);
  op.length = size_t{progress(slot).groupSize()} * sizeof(BufferDescriptor);
  op.rail = static_cast<uint8_t>(rail);
  op.desc = staging_->descOf(rail);
  op.peer = comm_.peer(rail);
  op.remoteAddress = ring_.address + entryOffset(slot);
  op.remoteKey = ring_.keys[rail];
  op.tag = encodeDescriptors(comm_.remoteId(), slot, progress(slot).groupSize());
  return writeOwn(device, op);
}

bool RecvSlots::writeAgain(uint32_t slot, core::Operation& op, int error) {
  // Only while the slot still waits for what the descriptors announce.
  if (lifecycle_.state(slot) != SlotState::kDescribed || comm_.closed()) return false;
  return writeOwnAgain(comm_.device(), comm_, op, ring_.keys, &*staging_, error);
}

void RecvSlots::failDescribing(uint32_t slot, int error) {
  // Released already (the write of a slot whose receive ended or was given up): nothing waits.
  if (lifecycle_.state(slot) == SlotState::kFree) return;
  core::Request* serving = request(slot);
  release(slot);
  // Cancelled: the comm is closing, and its requests end with it.
  if (serving == nullptr || error == FI_ECANCELED) return;
  serving->remaining = 1;
  comm_.onError(serving->ops[0], error, 0, "writing the receive descriptors to the sender");
}

void RecvSlots::onVoid(uint32_t slot, uint32_t index, size_t rail) {
  if (slot >= kSlots || lifecycle_.state(slot) == SlotState::kFree) return;
  if (!progress(slot).onVoid(index, rail)) return;
  // The slot's request ended already and this was its last void.
  if (lifecycle_.onVoidLanded(slot, progress(slot))) clear(slot);
}

bool RecvSlots::resetVoid(uint32_t slot, uint32_t index, int32_t tag, uint16_t seq, size_t rail) {
  if (slot >= kSlots || index >= kGroup || lifecycle_.state(slot) == SlotState::kFree) {
    return false;
  }
  const BufferDescriptor& described = entries(slot)[index];
  return described.tag == tag && described.seq == seq && progress(slot).resetVoid(index, rail);
}

bool RecvSlots::findDescribed(int32_t tag, uint16_t seq, uint32_t* slotOut,
                              uint32_t* indexOut) const {
  for (uint32_t busy = lifecycle_.busy(); busy != 0; busy &= busy - 1) {
    auto slot = static_cast<uint32_t>(__builtin_ctz(busy));
    if (requestAt(slot) == nullptr) continue;
    const BufferDescriptor* group = entries(slot);
    uint32_t count = chunkOf(slot)->progress[slot % kSlotsPerChunk].groupSize();
    for (uint32_t i = 0; i < count; ++i) {
      if (group[i].tag == tag && group[i].seq == seq && (group[i].flags & kSettled) == 0) {
        *slotOut = slot;
        *indexOut = i;
        return true;
      }
    }
  }
  return false;
}

bool RecvSlots::anyServing() const {
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    if (requestAt(slot) != nullptr) return true;
  }
  return false;
}

bool RecvSlots::writesInFlight() const {
  for (const auto& chunk : chunks_) {
    if (!chunk) continue;
    for (const core::Operation& op : chunk->descriptorWrites) {
      if (op.inFlight) return true;
    }
  }
  return false;
}

uint32_t RecvSlots::slotOfWrite(const core::Operation& op) const {
  for (uint32_t c = 0; c < kSlots / kSlotsPerChunk; ++c) {
    const Chunk* chunk = chunks_[c].get();
    if (chunk != nullptr && &op >= chunk->descriptorWrites &&
        &op < chunk->descriptorWrites + kSlotsPerChunk) {
      return c * kSlotsPerChunk + static_cast<uint32_t>(&op - chunk->descriptorWrites);
    }
  }
  return kSlots;
}

// The described buffers of the slot's first `count` (set only for a group's buffers) ended:
// landed, failed, or the comm went. NCCL's deregistration of one, when it came meanwhile, takes
// effect now.
void RecvSlots::dropHandles(uint32_t slot, uint32_t count) {
  core::MemoryHandle** handles = chunkOf(slot)->handles[slot % kSlotsPerChunk];
  for (uint32_t i = 0; i < count; ++i) {
    if (handles[i] != nullptr) core::endUse(handles[i]);
    handles[i] = nullptr;
  }
}

void RecvSlots::dropAllHandles() {
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    if (chunkOf(slot) != nullptr) dropHandles(slot);
  }
}

}  // namespace nnf::protocol::rdma
