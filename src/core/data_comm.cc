#include "core/data_comm.h"

#include <rdma/fi_errno.h>

#include "core/device.h"
#include "core/tags.h"
#include "log/log.h"

namespace nnf::core {
namespace {
// Distinct NCCL tags one comm can carry; NCCL uses one per peer rank sharing the connection.
constexpr size_t kTagsPerComm = 256;
}  // namespace

DataComm::DataComm(Device& device, Kind kind, uint32_t id, size_t requests, size_t opsPerRequest)
    : Comm(device, kind, id), pool_(this, requests, opsPerRequest), sequences_(kTagsPerComm) {}

void DataComm::onComplete(Operation& op, size_t length) {
  Request* request = op.request;
  if (request == nullptr) {
    onControlComplete(op, length);
    return;
  }
  request->sizes[op.index] = op.type == OpType::kSend ? op.length : length;
  if (--request->remaining == 0) finish(*request);
}

void DataComm::finish(Request& request) {
  if (request.state == Request::State::kActive) request.state = Request::State::kDone;
  if (request.state == Request::State::kAbandoned) pool_.release(&request);
}

void DataComm::onError(Operation& op, int error, size_t overflow, const char* text) {
  Request* request = op.request;
  if (request == nullptr) {
    onControlError(op, error, text);
    return;
  }
  --request->remaining;
  if (request->state != Request::State::kActive) {  // already failed: one WARN is enough
    if (request->remaining == 0) finish(*request);
    return;
  }
  request->state = Request::State::kFailed;
  if (error == FI_ECANCELED && closed()) {
    request->error = abi::kSuccess;
    return;
  }
  if (error == FI_ETRUNC) {
    NNF_WARN("receive truncated on comm %u: the sender sent %zu bytes more than the %zu-byte buffer"
             " (tag %d)", id(), overflow, op.length, tags::ncclTag(op.tag));
    request->error = abi::kInternalError;
    return;
  }
  NNF_WARN("%s of %zu bytes on comm %u failed: %s (%s)", op.type == OpType::kSend ? "send" : "receive",
           op.length, id(), fi_strerror(error), text != nullptr ? text : "no provider detail");
  request->error = abi::kRemoteError;
}

void DataComm::abandon(Request& request) {
  int held = 0;
  for (int i = 0; i < request.count; ++i) {
    Operation& op = request.ops[i];
    if (op.queued) device().unqueue(op);
    if (op.inFlight) {
      device().rail().cancel(&op.context);
      ++held;
    }
  }
  request.remaining = static_cast<uint8_t>(held);
  if (held == 0) {
    pool_.release(&request);
  } else {
    request.state = Request::State::kAbandoned;
  }
}

int DataComm::inFlight() const {
  int count = controlInFlight();
  for (const Request& request : const_cast<DataComm*>(this)->pool_.all()) {
    for (int i = 0; i < request.count; ++i) count += request.ops[i].inFlight ? 1 : 0;
  }
  return count;
}

void DataComm::cancelInFlight() {
  cancelControl();
  for (Request& request : pool_.all()) {
    if (request.state == Request::State::kFree) continue;
    for (int i = 0; i < request.count; ++i) cancel(request.ops[i]);
  }
}

}  // namespace nnf::core
