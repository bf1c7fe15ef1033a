#include "core/path_probe.h"

#include <cstring>

#include "core/device.h"
#include "core/wire.h"

namespace nnf::core {

PathProbe::~PathProbe() {
  if (header_.data != nullptr) device_.controlArena().release(&header_);
}

bool PathProbe::post(int index, size_t rail, fi_addr_t peer, uint64_t nowNs) {
  if (header_.data == nullptr) {
    if (!device_.controlArena().acquire(&header_)) return false;  // logged
    wire::ControlHeader header = wire::makeControlHeader(0, wire::ControlKind::kPing, 0);
    memcpy(header_.data, &header, sizeof(header));
  }
  Operation& op = ops_[index];
  op = Operation{};
  op.owner = this;
  op.type = OpType::kControlSend;
  op.rail = static_cast<uint8_t>(rail);
  op.buffer = header_.data;
  op.length = sizeof(wire::ControlHeader);
  op.desc = header_.descOf(rail);
  op.peer = peer;
  postedNs_[index] = nowNs;
  return device_.postFromKeeper(op) == abi::kSuccess;
}

void PathProbe::onComplete(Operation& op, size_t /*length*/) {
  device_.onPathProbeEnded(indexOf(op), 0, nullptr);
}

void PathProbe::onError(Operation& op, int error, size_t /*overflow*/, const char* text) {
  device_.onPathProbeEnded(indexOf(op), error, text);
}

}  // namespace nnf::core
