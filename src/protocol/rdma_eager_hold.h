// Bounce entries whose eager message is in doubt after its rail failed, or is being written
// again (SendRecovery holds and releases them, rdma_send_recovery.h). While any is held no eager
// message goes (EagerSender::open): an entry is never written again under the one in doubt.
#pragma once

#include <cstdint>

#include "protocol/rdma_eager.h"

namespace nnf::protocol::rdma {

class EagerHold {
 public:
  bool any() const { return entries_ != 0; }
  void hold(uint32_t entry) { entries_ |= uint64_t{1} << entry; }
  // True when this released the last entry held: sends that waited meanwhile may go eagerly.
  bool release(uint32_t entry) {
    if (entries_ == 0) return false;
    entries_ &= ~(uint64_t{1} << entry);
    return entries_ == 0;
  }

 private:
  static_assert(kEagerEntries <= 64, "one bit an entry");
  uint64_t entries_ = 0;
};

}  // namespace nnf::protocol::rdma
