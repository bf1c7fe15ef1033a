#include "protocol/sendrecv.h"

#include "core/device.h"
#include "core/memory_handle.h"
#include "core/recv_comm.h"
#include "core/send_comm.h"
#include "core/tags.h"

namespace nnf::protocol {

abi::Result SendRecv::postSend(core::SendComm& comm, core::Request& request, void* data,
                               size_t size, int tag, core::MemoryHandle* handle) {
  uint32_t seq = 0;  // nextSequence sets it whenever it succeeds; GCC cannot tell
  if (!comm.nextSequence(tag, &seq)) return abi::kInternalError;
  core::Operation& op = request.ops[0];
  op.owner = &comm;
  op.type = core::OpType::kSend;
  op.buffer = data;
  op.length = size;
  op.desc = handle != nullptr ? handle->desc : nullptr;
  op.peer = comm.peer();
  op.tag = core::tags::data(comm.remoteId(), seq, tag);
  core::Device& device = comm.device();
  // Inject copies the bytes with the CPU (EFA emulates it so): never from device memory.
  bool hostBuffer = handle == nullptr || handle->type == memory::MemType::kHost;
  if (size <= device.injectLimit() && hostBuffer) {
    // Small sends go inline: no completion to wait for, the request is done already.
    abi::Result result = device.inject(op);
    if (result == abi::kSuccess) {
      op.transferred = size;
      request.remaining = 0;
      request.state = core::Request::State::kDone;
      return abi::kSuccess;
    }
    if (result != abi::kInProgress) return result;
  }
  abi::Result result = device.post(op);
  if (result == abi::kSuccess) comm.holdRegistration(request, handle);
  return result;
}

abi::Result SendRecv::postRecv(core::RecvComm& comm, core::Request& request, int count,
                               void* const* data, const size_t* sizes, const int* tags,
                               core::MemoryHandle* const* handles) {
  for (int i = 0; i < count; ++i) {
    uint32_t seq = 0;  // as in postSend
    if (!comm.nextSequence(tags[i], &seq)) return abi::kInternalError;
    core::Operation& op = request.ops[i];
    op.owner = &comm;
    op.type = core::OpType::kRecv;
    op.buffer = data[i];
    op.length = sizes[i];
    op.desc = handles != nullptr && handles[i] != nullptr ? handles[i]->desc : nullptr;
    op.peer = FI_ADDR_UNSPEC;
    op.tag = core::tags::data(comm.id(), seq, tags[i]);
    // Room after the buffer where the provider must not truncate (host memory: one iov type).
    op.withRoom = comm.device().roomForReceives() && (handles == nullptr || handles[i] == nullptr ||
                                                      handles[i]->type == memory::MemType::kHost);
    abi::Result result = comm.device().post(op);
    if (result == abi::kSuccess)
      comm.holdRegistration(op, handles != nullptr ? handles[i] : nullptr);
    // Operations already posted stay with the request; it fails as a whole in test().
    if (result != abi::kSuccess) return result;
  }
  return abi::kSuccess;
}

}  // namespace nnf::protocol
