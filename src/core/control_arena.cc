#include "core/control_arena.h"

#include <rdma/fabric.h>

#include <new>

#include "log/log.h"

namespace nnf::core {

ControlArena::~ControlArena() = default;

bool ControlArena::acquire(ControlSlot* out) {
  if (free_.empty()) {
    Chunk chunk;
    chunk.memory.reset(new (std::nothrow) uint8_t[kSlotsPerChunk * ControlSlot::kSize]());
    if (!chunk.memory) {
      NNF_WARN("out of memory for connection set-up buffers");
      return false;
    }
    if (registrar_ != nullptr) {
      memory::Region region;
      region.base = chunk.memory.get();
      region.length = kSlotsPerChunk * ControlSlot::kSize;
      region.access = FI_SEND | FI_RECV;
      // The registrar logs a refusal with the provider's error text.
      if (registrar_->registerLocked(region, &chunk.registration) != 0) return false;
    }
    for (size_t i = kSlotsPerChunk; i-- > 0;) {
      free_.push_back({chunk.memory.get() + i * ControlSlot::kSize, chunk.registration.desc});
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
