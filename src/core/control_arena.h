// Buffers for connection set-up messages. Providers with FI_MR_LOCAL (EFA) want a descriptor
// for every buffer they touch, control messages included; registering each comm's few bytes
// would cost one registration per comm, so they come as slots of larger registered chunks.
// The rdma protocol takes its descriptor rings from a second arena of larger slots that peers
// write into (registered always, with remote write access).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <rdma/fabric.h>

#include "memory/region.h"

namespace nnf::core {

constexpr size_t kMaxArenaRails = memory::kMaxRails;

struct ControlSlot {
  static constexpr size_t kSize = 512;  // the control arena's slots (a connect message takes 336)
  uint8_t* data = nullptr;
  void* desc = nullptr;        // null where the provider needs no descriptor
  uint64_t remoteAddress = 0;  // what a peer writes to (arenas registered for remote access)
  uint64_t key = 0;
  // Arenas registered on every rail (the rdma rings and bounce areas): the rails after the
  // leader's, as memory::Registration has them (the address is the same on all).
  uint8_t railCount = 1;
  memory::Registration::Rail rails[memory::kMaxRails - 1] = {};
  uint64_t keyOf(size_t rail) const { return rail == 0 ? key : rails[rail - 1].key; }
  void* descOf(size_t rail) const { return rail == 0 ? desc : rails[rail - 1].desc; }
};

class ControlArena {
 public:
  // `registrar` null: the provider takes host buffers without descriptors, nothing is registered.
  // Otherwise chunks register through registerLocked (the device lock is held).
  // `slotsPerChunk`: slots registered at once (fewer for large slots: EFA pins what it registers).
  explicit ControlArena(memory::Registrar* registrar, size_t slotSize = ControlSlot::kSize,
                        uint64_t access = FI_SEND | FI_RECV, size_t slotsPerChunk = 256)
      : registrar_(registrar),
        slotSize_(slotSize),
        access_(access),
        slotsPerChunk_(slotsPerChunk) {}
  ~ControlArena();
  ControlArena(const ControlArena&) = delete;
  ControlArena& operator=(const ControlArena&) = delete;

  // Device lock held. False (logged) when a new chunk cannot be registered.
  bool acquire(ControlSlot* out);
  void release(ControlSlot* slot);
  // Device lock held: closes every registration before the domain goes (the memory stays until
  // the arena is destroyed, after the comms that point into it).
  void deregisterAll();

 private:
  struct Chunk {
    std::unique_ptr<uint8_t[]> memory;
    memory::Registration registration;
  };
  memory::Registrar* registrar_;
  size_t slotSize_;
  uint64_t access_;
  size_t slotsPerChunk_;
  std::vector<Chunk> chunks_;
  std::vector<ControlSlot> free_;
};

}  // namespace nnf::core
