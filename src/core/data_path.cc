// Memory registration and the data path entry points: isend, irecv, iflush, test.
#include <rdma/fi_errno.h>

#include "core/clock.h"
#include "core/memory_handle.h"
#include "core/plugin.h"
#include "core/recv_comm.h"
#include "core/send_comm.h"
#include "log/log.h"

namespace nnf::core {
namespace {

const char* memoryTypeName(int type) {
  switch (type) {
    case abi::kPtrHost: return "host";
    case abi::kPtrCuda: return "cuda";
    case abi::kPtrDmaBuf: return "dmabuf";
    default: return "unknown";
  }
}

MemoryHandle* checkHandle(void* handle, const char* caller) {
  auto* mh = static_cast<MemoryHandle*>(handle);
  if (mh != nullptr && mh->magic != MemoryHandle::kMagic) {
    NNF_WARN("%s: %p is not a registered memory handle", caller, handle);
    return nullptr;
  }
  return mh;
}

Comm* checkAnyDataComm(void* comm, const char* caller) {
  auto* base = static_cast<Comm*>(comm);
  if (base == nullptr || !base->alive() || base->kind() == Comm::Kind::kListen) {
    NNF_WARN("%s: %p is not an open send or receive comm", caller, comm);
    return nullptr;
  }
  return base;
}

}  // namespace

abi::Result Plugin::regMr(void* comm, void* data, size_t size, int type, MemoryHandle** out) {
  Comm* owner = checkAnyDataComm(comm, "regMr");
  if (owner == nullptr) return abi::kInternalError;
  if (out == nullptr || (data == nullptr && size > 0)) {
    NNF_WARN("regMr: NULL buffer or handle pointer");
    return abi::kInternalError;
  }
  if (type != abi::kPtrHost) {
    NNF_WARN("regMr: %s memory at %p (%zu bytes) is not supported by this device (ptrSupport=%d)",
             memoryTypeName(type), data, size, owner->device().properties().ptrSupport);
    return abi::kInternalError;
  }
  Device& device = owner->device();
  auto handle = std::make_unique<MemoryHandle>();
  handle->type = type;
  handle->device = &device;
  handle->base = reinterpret_cast<uintptr_t>(data);
  handle->length = size;
  if (size > 0) {
    std::lock_guard<std::mutex> lock(device.mutex());
    uint64_t requestedKey = device.nextRegistrationKey();
    int ret = fi_mr_reg(device.rail().domain(), data, size, FI_SEND | FI_RECV, 0, requestedKey, 0,
                        handle->mr.out(), nullptr);
    if (ret != 0) {
      NNF_WARN("registering %s memory at %p (%zu bytes) with %s failed: %s", memoryTypeName(type),
               data, size, device.provider().c_str(), fabric::errorText(ret).c_str());
      return abi::kSystemError;
    }
    handle->desc = fi_mr_desc(handle->mr.get());
    handle->key = fi_mr_key(handle->mr.get());
  }
  *out = handle.release();
  return abi::kSuccess;
}

abi::Result Plugin::regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset,
                                int fd, MemoryHandle** out) {
  if (type == abi::kPtrHost) return regMr(comm, data, size, type, out);
  NNF_WARN("regMrDmaBuf: DMA-BUF registration (fd %d) is not supported by this device", fd);
  return abi::kInternalError;
}

abi::Result Plugin::deregMr(void* comm, void* handle) {
  MemoryHandle* mh = checkHandle(handle, "deregMr");
  if (mh == nullptr) {
    if (handle == nullptr) NNF_WARN("deregMr: NULL memory handle");
    return abi::kInternalError;
  }
  Device& device = *mh->device;
  {
    std::lock_guard<std::mutex> lock(device.mutex());
    int ret = mh->mr.reset();
    if (ret != 0) {
      NNF_WARN("deregistering %zu bytes at %p failed: %s", mh->length,
               reinterpret_cast<void*>(mh->base), fabric::errorText(ret).c_str());
    }
  }
  mh->magic = 0;
  delete mh;
  return abi::kSuccess;
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
  std::lock_guard<std::mutex> lock(device.mutex());
  if (comm->peerFailed()) return abi::kRemoteError;
  Request* request = comm->pool().acquire(1);
  if (request == nullptr) {
    *out = nullptr;  // all requests busy: NCCL retries
    return abi::kSuccess;
  }
  request->postedNs = nowNs();
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
    if (handles != nullptr && handles[i] != nullptr && mhs[i] == nullptr) return abi::kInternalError;
    if (data[i] == nullptr && sizes[i] > 0) {
      NNF_WARN("irecv: NULL buffer %d for %zu bytes", i, sizes[i]);
      return abi::kInternalError;
    }
  }
  Device& device = comm->device();
  std::lock_guard<std::mutex> lock(device.mutex());
  if (comm->peerFailed()) return abi::kRemoteError;
  Request* request = comm->pool().acquire(static_cast<uint8_t>(count));
  if (request == nullptr) {
    *out = nullptr;
    return abi::kSuccess;
  }
  request->postedNs = nowNs();
  abi::Result result = device.protocol().postRecv(*comm, *request, count, data, sizes, tags, mhs);
  if (result != abi::kSuccess) {
    comm->abandon(*request);
    return result;
  }
  *out = request;
  return abi::kSuccess;
}

abi::Result Plugin::iflush(void* recvComm, int count, void* const* data, const int* sizes,
                           void* const* handles, Request** out) {
  RecvComm* comm = checkComm<RecvComm>(recvComm, Comm::Kind::kRecv, "iflush");
  if (comm == nullptr || out == nullptr) return abi::kInternalError;
  // Host memory is coherent once the receive completed: nothing to flush.
  *out = nullptr;
  return abi::kSuccess;
}

abi::Result Plugin::test(void* request, int* done, size_t* sizes, int* count) {
  auto* req = static_cast<Request*>(request);
  if (req == nullptr || done == nullptr) {
    NNF_WARN("test: NULL request or done pointer");
    return abi::kInternalError;
  }
  if (req->magic != Request::kMagic || req->state == Request::State::kFree ||
      req->state == Request::State::kAbandoned) {
    NNF_WARN("test: %p is not a pending request (completed and reported already?)", request);
    return abi::kInternalError;
  }
  *done = 0;
  DataComm& comm = *req->comm;
  Device& device = comm.device();
  std::lock_guard<std::mutex> lock(device.mutex());
  if (req->state == Request::State::kActive) {
    abi::Result result = device.progress();
    if (result != abi::kSuccess) return result;
    if (req->state == Request::State::kActive) comm.checkStalled(*req);
  }
  switch (req->state) {
    case Request::State::kDone:
      if (sizes != nullptr) {
        for (int i = 0; i < req->count; ++i) sizes[i] = req->sizes[i];
      }
      if (count != nullptr) *count = req->count;
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
