// A comm's slot of one of the device's rdma arenas (a descriptor ring at the sender, the staging
// area and the eager bounce area at the receiver), handed back when the comm goes; and the peer's
// slot that the comm writes into.
#pragma once

#include <cstdint>

#include "core/control_arena.h"

namespace nnf::protocol::rdma {

class ArenaSlot {
 public:
  explicit ArenaSlot(core::ControlArena* arena) : arena_(arena) {}
  ~ArenaSlot() {
    if (!leaked_ && arena_ != nullptr) arena_->release(&slot_);
  }
  ArenaSlot(const ArenaSlot&) = delete;
  ArenaSlot& operator=(const ArenaSlot&) = delete;
  bool acquire() { return arena_ != nullptr && arena_->acquire(&slot_); }
  bool held() const { return slot_.data != nullptr; }
  bool leaked() const { return leaked_; }
  const core::ControlSlot& operator*() const { return slot_; }
  const core::ControlSlot* operator->() const { return &slot_; }
  // A peer may still write into the slot: it is never handed out again (the arena keeps the
  // memory until the device goes, after its endpoint is closed).
  void leak() { leaked_ = true; }

 private:
  core::ControlArena* arena_;
  core::ControlSlot slot_;
  bool leaked_ = false;
};

// The peer's arena slot this comm writes into (the receiver: its sender's descriptor ring).
// Registered on every rail of the peer's device: one key each (the address is the same).
struct RemoteSlot {
  uint64_t address = 0;
  uint64_t keys[core::kMaxArenaRails] = {};
};

}  // namespace nnf::protocol::rdma
