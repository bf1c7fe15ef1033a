// How long a closed comm keeps memory its peer may still write into (the sender's descriptor
// ring, the receiver's bounce area) for a peer that neither answers nor dies.
#pragma once

#include <cstdint>

#include "config/config.h"
#include "core/clock.h"
#include "core/data_comm.h"
#include "core/device.h"

namespace nnf::protocol::rdma {

class Linger {
 public:
  // The comm closed: NCCL_FABRIC_CLOSE_TIMEOUT_MS from now (0: for ever).
  void start(const core::DataComm& comm) {
    int64_t limitMs = comm.device().config().integer(config::Param::kCloseTimeoutMs);
    untilNs_ = limitMs > 0 ? core::nowNs() + static_cast<uint64_t>(limitMs) * 1000000 : 0;
  }
  // Whether that time is still ahead (always before start).
  bool holding() const { return untilNs_ == 0 || core::nowNs() < untilNs_; }

 private:
  uint64_t untilNs_ = 0;  // 0: never gives up
};

}  // namespace nnf::protocol::rdma
