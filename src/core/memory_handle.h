// What regMr returns to NCCL: a registration with the device's domain. Registrations belong to
// the device, not to a comm, so one serves every comm of the device (regIsGlobal).
#pragma once

#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>

#include "fabric/fid.h"

namespace nnf::core {

class Device;

struct MemoryHandle {
  static constexpr uint32_t kMagic = 0x524d464eu;  // "NFMR"
  uint32_t magic = kMagic;
  int type = 0;  // NCCL_PTR_*
  Device* device = nullptr;
  uintptr_t base = 0;
  size_t length = 0;
  fabric::Fid<fid_mr> mr;  // empty when the provider needs no registration for this memory
  void* desc = nullptr;    // local descriptor for data operations
  uint64_t key = 0;        // remote key (for RMA protocols)
};

}  // namespace nnf::core
