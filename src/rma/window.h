// One symmetric window (regMrSym): the local registration and, per rank, where peers reach that
// rank's window of the same index on each rail. Windows are numbered in registration order,
// which every rank shares (regMrSym is collective).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/memory_handle.h"
#include "memory/region.h"
#include "rma/handles.h"

namespace nnf::rma {

class Group;

struct RemoteWindow {
  uint64_t address = 0;  // the provider's addressing of the window's first byte
  uint64_t size = 0;
  uint64_t keys[memory::kMaxRails] = {};
  bool present = false;  // its record arrived
  bool host = false;     // host memory: inline bytes may go into it
};

struct Window {
  HandleRef ref;  // first: NCCL's mhandle
  Group* group = nullptr;
  uint32_t index = 0;
  core::MemoryHandle* mh = nullptr;  // null for an empty window
  uint8_t* base = nullptr;
  size_t size = 0;
  bool host = true;
  bool neverReset = false;  // NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET
  bool alive = true;
  std::vector<RemoteWindow> remote;  // per rank (this rank's own record too)

  // Local [offset, offset + length) lies inside the window.
  bool holds(uint64_t offset, size_t length) const {
    return offset <= size && length <= size - offset;
  }
};

}  // namespace nnf::rma
