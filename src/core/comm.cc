#include "core/comm.h"

#include "core/device.h"

namespace nnf::core {

Comm::~Comm() {
  ref_.magic = CommRef::kMagicClosed;
  device_.controlArena().release(&control_);
}

bool Comm::acquireControl() {
  return control_.data != nullptr || device_.controlArena().acquire(&control_);
}

void Comm::close() {
  closed_ = true;
  cancelInFlight();
}

void Comm::cancel(Operation& op) {
  if (op.queued) device_.unqueue(op);
  // Sends usually cannot be cancelled; they complete on their own and the device waits.
  if (op.inFlight) device_.cancel(op);
}

}  // namespace nnf::core
