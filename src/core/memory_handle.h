// What regMr returns to NCCL: a reference to a cached registration with the device's domain.
// Registrations belong to the device, not to a comm, so one serves every comm of the device
// (regIsGlobal).
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/mr_cache.h"

namespace nnf::core {

class MemoryRegistry;

struct MemoryHandle {
  static constexpr uint32_t kMagic = 0x524d464eu;  // "NFMR"
  uint32_t magic = kMagic;
  int ncclType = 0;  // NCCL_PTR_*
  memory::MemType type = memory::MemType::kHost;
  MemoryRegistry* registry = nullptr;
  const void* base = nullptr;
  size_t length = 0;
  memory::MrHandle* mr = nullptr;  // null for an empty buffer
  void* desc = nullptr;            // local descriptor for data operations
  // rdma sends that wait for their receive with this buffer, and whether NCCL deregistered it
  // meanwhile (then they fail instead of writing): both under the device lock.
  uint32_t waitingSends = 0;
  bool released = false;
  // Uses of this registration that outlive NCCL's interest in them: rdma receive buffers a
  // sender may still write into (described, not completed, the sender not done), and sends or
  // writes still with the provider or in the device's retry queue (a closing comm keeps those
  // going). Deregistered meanwhile, the registration stays until the last use ends (mrOwed): a
  // key revoked under a live write makes shm drop it unfinished, and a queued write posted with
  // a closed descriptor is refused by providers that check them (EFA).
  uint32_t activeUses = 0;
  bool mrOwed = false;

  // The peer-visible address and key of `ptr` inside this registration (RMA).
  uint64_t remoteAddress(const void* ptr) const { return mr->registration().remoteAddress(ptr); }
  uint64_t key() const { return mr->registration().key; }
  // The same on rail `rail` of the device (0: the leader); rails the registration lacks have
  // none (0, null).
  uint64_t key(size_t rail) const {
    const memory::Registration& reg = mr->registration();
    return rail < reg.railCount ? reg.keyOf(rail) : 0;
  }
  void* descOn(size_t rail) const {
    if (desc == nullptr || rail == 0) return desc;
    const memory::Registration& reg = mr->registration();
    return rail < reg.railCount ? reg.descOf(rail) : nullptr;
  }
};

}  // namespace nnf::core
