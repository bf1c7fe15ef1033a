#include "core/listen_comm.h"

#include <rdma/fi_errno.h>

#include "core/device.h"
#include "core/recv_comm.h"
#include "core/tags.h"
#include "log/log.h"

namespace nnf::core {

ListenComm::ListenComm(Device& device, uint32_t id) : Comm(device, Kind::kListen, id) {
  receive_.owner = this;
  receive_.type = OpType::kRecv;
  receive_.tag = tags::control(id, tags::ControlKind::kConnect);
}

// One byte more than a valid message, so that an oversized one shows up as truncated.
static_assert(sizeof(wire::ConnectMessage) + 1 <= ControlSlot::kSize);

int ListenComm::start() {
  if (!acquireControl()) return -FI_ENOMEM;
  receive_.buffer = control().data;
  receive_.length = sizeof(wire::ConnectMessage) + 1;
  receive_.desc = control().desc;
  return postReceive();
}

void ListenComm::cancelInFlight() {
  cancel(receive_);
  // A receive comm still being accepted was never seen by NCCL: it goes with the listener.
  if (accepting_ != nullptr) {
    device().closeComm(*accepting_);
    accepting_ = nullptr;
  }
}

int ListenComm::postReceive() {
  abi::Result result = device().post(receive_);
  return result == abi::kSuccess ? 0 : -FI_EIO;
}

void ListenComm::onComplete(Operation& op, size_t length) {
  if (closed()) return;
  wire::ConnectMessage message;
  std::string reason;
  if (wire::decodeConnectMessage(control().data, length, id(), &message, &reason)) {
    pending_.push_back(message);
  } else {
    NNF_WARN("dropping a connection request on listener %u: %s", id(), reason.c_str());
  }
  if (postReceive() != 0) failure_ = abi::kSystemError;
}

void ListenComm::onError(Operation& op, int error, size_t overflow, const char* text) {
  if (closed()) return;
  if (error == FI_ETRUNC) {
    NNF_WARN("dropping an oversized connection request on listener %u", id());
  } else {
    NNF_WARN("receiving connection requests on listener %u failed: %s (%s)", id(),
             fi_strerror(error), text != nullptr ? text : "");
  }
  if (postReceive() != 0) failure_ = abi::kSystemError;
}

abi::Result ListenComm::accept(RecvComm** out) {
  *out = nullptr;
  if (failure_ != abi::kSuccess) return failure_;
  if (accepting_ == nullptr && !pending_.empty()) {
    wire::ConnectMessage message = pending_.front();
    pending_.pop_front();
    accepting_ = device().createComm<RecvComm>(static_cast<size_t>(device().properties().maxRecvs));
    if (accepting_ == nullptr) return abi::kSystemError;
    abi::Result result = accepting_->start(message);
    if (result != abi::kSuccess) {
      // Through the normal close: start() may have posted receives that point into the comm.
      device().closeComm(*accepting_);
      accepting_ = nullptr;
      return result;
    }
  }
  if (accepting_ == nullptr) return abi::kSuccess;
  if (accepting_->failed()) {
    device().closeComm(*accepting_);
    accepting_ = nullptr;
    return abi::kRemoteError;
  }
  if (accepting_->ready()) {
    *out = accepting_;
    accepting_ = nullptr;
  }
  return abi::kSuccess;
}

}  // namespace nnf::core
