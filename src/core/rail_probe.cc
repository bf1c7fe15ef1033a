#include "core/rail_probe.h"

#include <stdexcept>

#include "core/device.h"

namespace nnf::core {

RailProbe::RailProbe(Device& device) : device_(device) {
  if (device.memory().registerHost(words_, sizeof(words_), FI_READ | FI_REMOTE_READ, &handle_) !=
      abi::kSuccess) {
    throw std::runtime_error("cannot register the rail probes' word");
  }
  for (size_t rail = 0; rail < device.railCount(); ++rail) {
    const auto& self = device.rail(rail).address();
    if (device.peerAddress(self.data(), self.size(), &self_[rail], rail) != 0) {
      throw std::runtime_error("cannot insert our own address for the rail probes");
    }
  }
}

RailProbe::~RailProbe() {
  deregister();
}

void RailProbe::deregister() {
  if (handle_ != nullptr) device_.memory().deregister(handle_);
  handle_ = nullptr;
}

bool RailProbe::post(size_t rail) {
  Operation& op = ops_[rail];
  op = Operation{};
  op.owner = this;
  op.type = OpType::kRead;
  op.rail = static_cast<uint8_t>(rail);
  op.buffer = &words_[1];
  op.length = sizeof(words_[1]);
  op.desc = handle_->descOn(rail);
  op.peer = self_[rail];
  op.remoteAddress = handle_->remoteAddress(&words_[0]);
  op.remoteKey = handle_->key(rail);
  return device_.postFromKeeper(op) == abi::kSuccess;
}

void RailProbe::onComplete(Operation& op, size_t /*length*/) {
  device_.onProbeEnded(op.rail, 0, nullptr);
}

void RailProbe::onError(Operation& op, int error, size_t /*overflow*/, const char* text) {
  device_.onProbeEnded(op.rail, error, text);
}

}  // namespace nnf::core
