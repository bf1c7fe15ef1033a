// What NCCL holds for the RMA layer's objects, and the way back from it. Every handle starts
// with a magic and a kind read as plain data before anything else of the object is touched, so
// that a stale, foreign or garbled pointer is reported (one WARN) instead of followed, as the net
// ABI's comms are (core/comm.h).
#pragma once

#include <cstdint>
#include <cstring>

namespace nnf::rma {

enum class HandleKind : uint32_t { kInstance = 1, kListener, kGroup, kContext, kWindow, kRequest };

struct HandleRef {
  static constexpr uint32_t kMagicAlive = 0x4f4d5252u;  // "RRMO"
  static constexpr uint32_t kMagicDead = 0x44414544u;   // "DEAD"
  uint32_t magic = kMagicAlive;
  HandleKind kind = HandleKind::kInstance;
  void* object = nullptr;
};

// The object behind `handle` when it is a live handle of `kind`, else nullptr.
template <typename T>
T* fromHandle(const void* handle, HandleKind kind) {
  if (handle == nullptr) return nullptr;
  HandleRef ref;
  memcpy(&ref, handle, sizeof(ref));
  if (ref.magic != HandleRef::kMagicAlive || ref.kind != kind) return nullptr;
  return static_cast<T*>(ref.object);
}

}  // namespace nnf::rma
