// Drain receives for closed comm ids. A message can still arrive for a comm after it closed (a
// peer that has not closed yet, a send that was on the wire, a ping); left unmatched it would
// stay in the provider for ever (shm keeps it in one of its 1,024 receive slots, tcp keeps a
// rendezvous sender waiting). So every closed id gets one receive matching anything addressed to
// it (any sequence number, NCCL tag or control kind) into a small scratch buffer: a larger message
// completes truncated, which frees it, and the receive is posted again.
//
// Where the provider must never see a truncated receive (shm spins in fi_cq_read on a message
// above 4 KiB; rxm over tcp in libfabric 1.x fails the connection every comm to that peer uses),
// every drain receive shares the device's scratch area, as large as the largest message.
//
// The pool is bounded and first-in first-out: the oldest id stops being drained when the pool is
// full, and an id stops being drained before it is handed to a new comm. Comm ids are handed out
// round-robin, so an id is reused only after every other one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/control_arena.h"
#include "core/operation.h"
#include "core/scratch_area.h"

namespace nnf::core {

class Device;

class DrainPool final : public OperationOwner {
 public:
  // `scratch` not null: receive into that shared area (no descriptor: host memory the provider
  // needs no registration for), else into 256-byte control slots.
  DrainPool(Device& device, size_t capacity, ScratchArea* scratch = nullptr);
  // The device closes its endpoint first: nothing posted here is touched again.
  ~DrainPool();
  DrainPool(const DrainPool&) = delete;
  DrainPool& operator=(const DrainPool&) = delete;

  // Everything below: device lock held.
  // Starts draining `id` (evicting the oldest id when full). Logged and skipped when no scratch
  // buffer or receive can be had: the id's late messages then stay with the provider.
  void add(uint32_t id);
  // Stops draining `id` (it is about to name a new comm); no-op when it is not drained.
  void remove(uint32_t id);
  bool draining(uint32_t id) const { return byId_.count(id) != 0; }
  size_t size() const { return byId_.size(); }
  size_t capacity() const { return capacity_; }
  // Messages consumed and discarded so far.
  uint64_t discarded() const { return discarded_; }

  void onComplete(Operation& op, size_t length) override;
  void onError(Operation& op, int error, size_t overflow, const char* text) override;

 private:
  struct Entry {
    Operation op;  // first: its context leads back to the entry
    ControlSlot slot;
    uint32_t id = 0;
    bool active = true;  // false: cancelled, waiting for the provider to give it back
  };
  void stop(Entry* entry);
  void repost(Entry* entry);
  void free(Entry* entry);

  Device& device_;
  size_t capacity_;
  ScratchArea* scratch_;
  std::deque<uint32_t> order_;  // ids in the order they were added (may hold removed ones)
  std::unordered_map<uint32_t, std::unique_ptr<Entry>> byId_;
  std::vector<std::unique_ptr<Entry>> stopping_;  // cancelled, completion pending
  uint64_t discarded_ = 0;
  bool warned_ = false;
};

}  // namespace nnf::core
