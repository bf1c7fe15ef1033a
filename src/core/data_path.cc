// Memory registration and the data path entry points: isend, irecv, iflush, test.
#include <rdma/fi_errno.h>

#include "core/memory_handle.h"
#include "core/plugin.h"
#include "core/recv_comm.h"
#include "core/send_comm.h"
#include "log/log.h"
#include "memory/gdr_policy.h"

namespace nnf::core {
namespace {

MemoryHandle* checkHandle(void* handle, const char* caller) {
  auto* mh = static_cast<MemoryHandle*>(handle);
  if (mh != nullptr && mh->magic != MemoryHandle::kMagic) {
    NNF_WARN("%s: %p is not a registered memory handle", caller, handle);
    return nullptr;
  }
  return mh;
}

Comm* checkAnyDataComm(void* comm, const char* caller) {
  Comm* base = Comm::fromHandle(comm);
  if (base == nullptr || !base->alive() || base->kind() == Comm::Kind::kListen) {
    NNF_WARN("%s: %p is not an open send or receive comm", caller, comm);
    return nullptr;
  }
  return base;
}

}  // namespace

abi::Result Plugin::regMr(void* comm, void* data, size_t size, int type, MemoryHandle** out) {
  return regMrDmaBuf(comm, data, size, type, 0, -1, out);
}

abi::Result Plugin::regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset,
                                int fd, MemoryHandle** out) {
  Comm* owner = checkAnyDataComm(comm, "regMr");
  if (owner == nullptr) return abi::kInternalError;
  if (out == nullptr || (data == nullptr && size > 0)) {
    NNF_WARN("regMr: NULL buffer or handle pointer");
    return abi::kInternalError;
  }
  if (type == abi::kPtrDmaBuf && fd < 0) {
    NNF_WARN("regMrDmaBuf: invalid file descriptor %d", fd);
    return abi::kInternalError;
  }
  // The registry takes the domain lock itself (through the registrar): no device lock here.
  abi::Result result = owner->device().memory().registerBuffer(data, size, type, fd, offset, out);
  if (result == abi::kSuccess) track(*out);
  return result;
}

abi::Result Plugin::deregMr(void* comm, void* handle) {
  if (handle == nullptr) {
    NNF_WARN("deregMr: NULL memory handle");
    return abi::kInternalError;
  }
  if (!untrack(handle)) {
    NNF_WARN("deregMr: %p is not a registered memory handle (deregistered already?)", handle);
    return abi::kInternalError;
  }
  auto* mh = static_cast<MemoryHandle*>(handle);
  // Sends waiting for their receive (rdma) must see the release before the registration goes.
  // The registry's device lock, not `comm`'s: NCCL may deregister after closing the comm.
  bool keep = false;
  bool deferMr = false;
  {
    std::lock_guard<fabric::DomainLock> lock(mh->registry->deviceLock());
    mh->released = true;
    // Receives a sender may still write, writes and sends still going: the key and descriptor
    // stay valid until they end.
    deferMr = mh->activeUses > 0;
    mh->mrOwed = deferMr;
    keep = mh->waitingSends > 0 || deferMr;
  }
  MemoryRegistry* registry = mh->registry;
  abi::Result result = registry->deregister(mh, keep, deferMr);
  registry->releaseOwed();
  return result;
}

abi::Result Plugin::isend(void* sendComm, void* data, size_t size, int tag, void* handle,
                          Request** out) {
  SendComm* comm = checkComm<SendComm>(sendComm, Comm::Kind::kSend, "isend");
  if (comm == nullptr || out == nullptr) return abi::kInternalError;
  MemoryHandle* mh = checkHandle(handle, "isend");
  if (handle != nullptr && mh == nullptr) return abi::kInternalError;
  if (data == nullptr && size > 0) {
    NNF_WARN("isend: NULL buffer for %zu bytes", size);
    return abi::kInternalError;
  }
  Device& device = comm->device();
  if (size > device.properties().maxMessageBytes) {
    NNF_WARN("isend: %zu bytes exceed the largest message device %d takes (%zu bytes)", size,
             device.index(), device.properties().maxMessageBytes);
    return abi::kInvalidArgument;
  }
  std::lock_guard<fabric::DomainLock> lock(device.domainLock());
  if (comm->refusesRequests()) return abi::kRemoteError;
  Request* request = comm->pool().acquire(1);
  if (request == nullptr) {
    *out = nullptr;  // all requests busy: NCCL retries
    return abi::kSuccess;
  }
  abi::Result result = device.protocol().postSend(*comm, *request, data, size, tag, mh);
  if (result != abi::kSuccess) {
    comm->abandon(*request);
    return result;
  }
  *out = request;
  return abi::kSuccess;
}

abi::Result Plugin::irecv(void* recvComm, int count, void* const* data, const size_t* sizes,
                          const int* tags, void* const* handles, Request** out) {
  RecvComm* comm = checkComm<RecvComm>(recvComm, Comm::Kind::kRecv, "irecv");
  if (comm == nullptr || out == nullptr) return abi::kInternalError;
  if (count < 1 || static_cast<size_t>(count) > comm->maxRecvs()) {
    NNF_WARN("irecv: %d buffers requested, the device allows 1 to %zu", count, comm->maxRecvs());
    return abi::kInternalError;
  }
  if (data == nullptr || sizes == nullptr || tags == nullptr) {
    NNF_WARN("irecv: NULL buffer, size or tag array");
    return abi::kInternalError;
  }
  MemoryHandle* mhs[abi::kMaxRequests];
  for (int i = 0; i < count; ++i) {
    mhs[i] = checkHandle(handles != nullptr ? handles[i] : nullptr, "irecv");
    if (handles != nullptr && handles[i] != nullptr && mhs[i] == nullptr)
      return abi::kInternalError;
    if (data[i] == nullptr && sizes[i] > 0) {
      NNF_WARN("irecv: NULL buffer %d for %zu bytes", i, sizes[i]);
      return abi::kInternalError;
    }
    if (sizes[i] > comm->device().properties().maxMessageBytes) {
      NNF_WARN(
          "irecv: buffer %d of %zu bytes exceeds the largest message device %d takes (%zu bytes)",
          i, sizes[i], comm->device().index(), comm->device().properties().maxMessageBytes);
      return abi::kInvalidArgument;
    }
  }
  Device& device = comm->device();
  std::lock_guard<fabric::DomainLock> lock(device.domainLock());
  if (comm->refusesRequests()) return abi::kRemoteError;
  Request* request = comm->pool().acquire(static_cast<uint8_t>(count));
  if (request == nullptr) {
    *out = nullptr;
    return abi::kSuccess;
  }
  abi::Result result = device.protocol().postRecv(*comm, *request, count, data, sizes, tags, mhs);
  if (result != abi::kSuccess) {
    comm->abandon(*request);
    if (result == abi::kInProgress) {
      // The protocol cannot take it yet (NCCL retries): what frees its room (a void, a write's
      // completion) needs progress, and a caller whose other requests ended calls nothing else.
      *out = nullptr;
      return device.progress();
    }
    return result;
  }
  *out = request;
  return abi::kSuccess;
}

abi::Result Plugin::iflush(void* recvComm, int count, void* const* data, const int* sizes,
                           void* const* handles, Request** out) {
  RecvComm* comm = checkComm<RecvComm>(recvComm, Comm::Kind::kRecv, "iflush");
  if (comm == nullptr || out == nullptr) return abi::kInternalError;
  *out = nullptr;
  if (count < 1 || static_cast<size_t>(count) > comm->maxRecvs() || data == nullptr ||
      sizes == nullptr || handles == nullptr) {
    NNF_WARN("iflush: invalid count %d or NULL arrays", count);
    return abi::kInternalError;
  }
  // One flush covers the whole grouped receive: pick the largest GPU buffer that received data.
  int target = -1;
  for (int i = 0; i < count; ++i) {
    MemoryHandle* mh = checkHandle(handles[i], "iflush");
    if (mh == nullptr || mh->type == memory::MemType::kHost || sizes[i] <= 0) continue;
    if (target < 0 || sizes[i] > sizes[target]) target = i;
  }
  if (target < 0) return abi::kSuccess;  // host memory or nothing received: nothing to flush
  auto* mh = static_cast<MemoryHandle*>(handles[target]);
  Device& device = comm->device();
  memory::FlushDecision decision = memory::decideFlush(
      {mh->type, static_cast<size_t>(sizes[target]), device.flushSetting(), device.rmaRead(),
       device.cuda() != nullptr && device.cuda()->hasFlush()});
  switch (decision.method) {
    case memory::FlushMethod::kNone:
      return abi::kSuccess;
    case memory::FlushMethod::kCuda:
      if (device.cuda()->flushGdrWrites() != 0) {
        NNF_WARN("iflush: cuFlushGPUDirectRDMAWrites failed");
        return abi::kUnhandledCudaError;
      }
      return abi::kSuccess;
    case memory::FlushMethod::kRdmaRead:
      break;
  }
  std::lock_guard<fabric::DomainLock> lock(device.domainLock());
  Request* request = comm->flushPool().acquire(1);
  if (request == nullptr) {
    // NCCL would take a NULL request for a finished flush: refuse rather than skip it.
    NNF_WARN("iflush: more than %zu flushes pending on comm %u", comm->flushPool().capacity(),
             comm->id());
    return abi::kInternalError;
  }
  Operation& op = request->ops[0];
  MemoryHandle* word = device.flushWord();
  // The first rail up: every buffer is registered on each (a read of our own: no path to a peer).
  size_t rail = device.railHealth().firstUp(device.railCount(), 0);
  op.owner = comm;
  op.type = OpType::kRead;
  op.rail = static_cast<uint8_t>(rail);
  op.buffer = const_cast<void*>(word->base);
  op.length = 4;
  op.desc = word->descOn(rail);
  op.peer = device.selfAddress(rail);
  op.remoteAddress = mh->remoteAddress(data[target]);
  op.remoteKey = mh->key(rail);
  abi::Result result = device.post(op);
  if (result != abi::kSuccess) {
    comm->abandon(*request);
    return result;
  }
  // Held while the read is out, and named there should it go again through another rail.
  comm->holdRegistration(op, mh);
  *out = request;
  return abi::kSuccess;
}

abi::Result Plugin::test(void* request, int* done, size_t* sizes, int* count) {
  auto* req = static_cast<Request*>(request);
  if (req == nullptr || done == nullptr) {
    NNF_WARN("test: NULL request or done pointer");
    return abi::kInternalError;
  }
  if (req->magic != Request::kMagic) {
    NNF_WARN("test: %p is not a request of this plugin", request);
    return abi::kInternalError;
  }
  *done = 0;
  // The magic and the owning comm never change; the state does, under the device lock.
  DataComm& comm = *req->comm;
  Device& device = comm.device();
  std::lock_guard<fabric::DomainLock> lock(device.domainLock());
  if (req->state == Request::State::kFree || req->state == Request::State::kAbandoned) {
    NNF_WARN("test: %p is not a pending request (completed and reported already?)", request);
    return abi::kInternalError;
  }
  if (req->state == Request::State::kActive) {
    abi::Result result = device.progress();
    if (result != abi::kSuccess) return result;
    if (req->state == Request::State::kActive) comm.checkStalled(*req);
  }
  switch (req->state) {
    case Request::State::kDone:
      if (comm.kind() == Comm::Kind::kSend) {
        // One message, whatever number of rails carried its shares.
        size_t total = 0;
        for (int i = 0; i < req->count; ++i) total += req->ops[i].transferred;
        if (sizes != nullptr) sizes[0] = total;
        if (count != nullptr) *count = 1;
      } else {
        if (sizes != nullptr) {
          for (int i = 0; i < req->count; ++i) sizes[i] = req->ops[i].transferred;
        }
        if (count != nullptr) *count = req->count;
      }
      *done = 1;
      comm.retire(*req);
      return abi::kSuccess;
    case Request::State::kFailed: {
      abi::Result error = req->error != abi::kSuccess ? req->error : abi::kInternalError;
      comm.retire(*req);
      return error;
    }
    default:
      return abi::kSuccess;
  }
}

}  // namespace nnf::core
