// The requests iput, iputSignal, iget and iflush hand to NCCL. A request carries its operations
// inline: one per rail share of the data (each share goes out in segments of at most the
// largest write the provider does whole, reposted as each completes) and one for a signaled
// put's entry. A signaled put that finds no free ring slot at its target waits on its link,
// everything it needs kept here, and starts when credits come back.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_net/types.h"
#include "core/memory_handle.h"
#include "core/operation.h"
#include "memory/region.h"
#include "rma/handles.h"

namespace nnf::rma {

class Context;
struct Window;
struct Request;

enum class RequestKind : uint8_t { kPut, kPutSignal, kGet, kFlush };

// One operation of a request and the part of its share not posted yet.
struct OpSlot {
  core::Operation op;  // first: completions lead back here
  Request* request = nullptr;
  uint64_t left = 0;         // bytes of the share after the posted segment
  uint64_t nextLocal = 0;    // where the next segment starts: local address
  uint64_t nextRemote = 0;   // and at the peer
  bool entry = false;        // the signal entry's write, not data
};

constexpr size_t kShareOps = memory::kMaxRails;
constexpr size_t kRequestOps = kShareOps + 1;  // the shares, then a signal entry

struct Request {
  // kWaitingSlot: a signaled put that waits for a ring slot at its target (nothing posted).
  // kAbandoned: failed and reported, some operations still with the provider; it returns to
  // the pool when the last one does.
  enum class State : uint8_t { kFree, kWaitingSlot, kActive, kDone, kFailed, kAbandoned };
  static constexpr uint32_t kMagic = 0x5152464eu;  // "NFRQ"

  uint32_t magic = kMagic;
  State state = State::kFree;
  RequestKind kind = RequestKind::kPut;
  uint8_t shares = 0;     // data operations used (ops[0 .. shares-1])
  uint16_t pending = 0;   // operations with the provider or queued for it
  abi::Result error = abi::kSuccess;
  Context* ctx = nullptr;
  uint32_t peer = 0;
  uint32_t seq = 0;        // signaled puts: the sequence number on the link
  uint32_t segments = 0;   // data segments (a signaled put's entry announces them)
  bool finished = false;   // settled: unlinked, registrations and the peer's count released
  uint64_t startedNs = 0;  // first stall check (0: none yet)

  // What a signaled put needs to start (kept while it waits for a slot).
  Window* src = nullptr;
  Window* dst = nullptr;
  uint64_t srcOff = 0;
  uint64_t dstOff = 0;
  uint64_t size = 0;
  uint32_t signalWindow = 0;
  uint64_t signalOffset = 0;
  uint64_t signalValue = 0;
  uint32_t plainBefore = 0;
  uint8_t signalOp = 0;
  bool strong = false;

  // Registrations held while operations use them (MemoryHandle::activeUses).
  core::MemoryHandle* held[2] = {nullptr, nullptr};

  Request* prev = nullptr;  // the context's unfinished requests, oldest first
  Request* next = nullptr;
  Request* nextWaiting = nullptr;  // the link's signaled puts waiting for a slot

  OpSlot ops[kRequestOps];
};

}  // namespace nnf::rma
