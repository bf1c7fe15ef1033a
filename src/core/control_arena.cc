#include "core/control_arena.h"

#include <rdma/fabric.h>

#include <new>

#include "log/log.h"

namespace nnf::core {

ControlArena::~ControlArena() = default;

bool ControlArena::acquire(ControlSlot* out) {
  if (free_.empty()) {
    // Not zeroed: the pages of slots never used are never touched (rdma rings are 16 KiB a comm).
    Chunk chunk;
    chunk.memory.reset(new (std::nothrow) uint8_t[slotsPerChunk_ * slotSize_]);
    if (!chunk.memory) {
      NNF_WARN("out of memory for connection set-up buffers");
      return false;
    }
    if (registrar_ != nullptr) {
      memory::Region region;
      region.base = chunk.memory.get();
      region.length = slotsPerChunk_ * slotSize_;
      region.access = access_;
      // The registrar logs a refusal with the provider's error text.
      if (registrar_->registerLocked(region, &chunk.registration) != 0) return false;
    }
    for (size_t i = slotsPerChunk_; i-- > 0;) {
      uint8_t* data = chunk.memory.get() + i * slotSize_;
      uint64_t remote = registrar_ != nullptr ? chunk.registration.remoteAddress(data) : 0;
      ControlSlot slot{data, chunk.registration.desc, remote, chunk.registration.key};
      slot.railCount = chunk.registration.railCount;
      for (size_t r = 1; r < slot.railCount; ++r)
        slot.rails[r - 1] = chunk.registration.rails[r - 1];
      free_.push_back(slot);
    }
    chunks_.push_back(std::move(chunk));
  }
  *out = free_.back();
  free_.pop_back();
  return true;
}

void ControlArena::release(ControlSlot* slot) {
  if (slot->data == nullptr) return;
  free_.push_back(*slot);
  *slot = ControlSlot{};
}

void ControlArena::deregisterAll() {
  if (registrar_ == nullptr) return;
  for (Chunk& chunk : chunks_) {
    if (chunk.registration.provider != nullptr) registrar_->deregisterLocked(chunk.registration);
  }
}

}  // namespace nnf::core
