#include "core/rail_health.h"

#include <rdma/fi_errno.h>

#include "log/assert.h"

namespace nnf::core {

bool RailHealth::isPathFailure(int error) {
  switch (error) {
    case FI_EHOSTUNREACH:  // efa: the remote was never reached on this path (prov_errno 15)
    case FI_ECONNABORTED:  // efa: the remote stopped answering (SRD's timeout, 13, 4124, 4126)
    case FI_ENETDOWN:
    case FI_ENETUNREACH:
      return true;
    // Not FI_ECONNRESET or FI_ETIMEDOUT: a socket reports them for a peer that died as well.
    default:
      return false;
  }
}

bool RailHealth::markDown(size_t rail) {
  if (rail >= rails_ || state(rail) == RailState::kDown) return false;
  to(rail, RailState::kDown);
  return true;
}

void RailHealth::to(size_t rail, RailState next) {
  NNF_ASSERT(state(rail) == RailState::kUp && next == RailState::kDown,
             "rail %zu: no transition from %s to %s", rail, stateName(state(rail)),
             stateName(next));
  if (next == RailState::kDown) upMask_ &= ~(1u << rail);
}

}  // namespace nnf::core
