// The entry points every ABI version shares: argument conversion at the edge, then the core.
#include "abi/entries.h"

#include "abi/convert.h"
#include "core/plugin.h"
#include "log/log.h"

namespace nnf::abi::entry {
namespace {

using core::Plugin;

// Output pointers are checked here: the core writes into our locals, so it cannot see them.
bool outputMissing(const void* out, const char* entry) {
  if (out != nullptr) return false;
  NNF_WARN("%s: NULL output pointer", entry);
  return true;
}

Result postSend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  if (outputMissing(request, "isend")) return kInternalError;
  core::Request* req = nullptr;
  Result result = Plugin::instance().isend(sendComm, data, size, tag, mhandle, &req);
  if (result == kSuccess) *request = req;
  return result;
}

Result postRecv(void* recvComm, int n, void** data, const size_t* sizes, int* tags, void** mhandles,
                void** request) {
  if (outputMissing(request, "irecv")) return kInternalError;
  core::Request* req = nullptr;
  Result result = Plugin::instance().irecv(recvComm, n, data, sizes, tags, mhandles, &req);
  if (result == kSuccess) *request = req;
  return result;
}

}  // namespace

Result init(Logger logger) noexcept {
  return guarded("init", [&] { return Plugin::instance().init(logger); });
}

Result initWithProfiler(Logger logger, ProfilerCallback profiler) noexcept {
  return init(logger);
}

Result devices(int* count) noexcept {
  return guarded("devices", [&] { return Plugin::instance().deviceCount(count); });
}

Result listen(int dev, void* handle, void** listenComm) noexcept {
  return guarded("listen", [&] {
    if (outputMissing(listenComm, "listen")) return kInternalError;
    void* comm = nullptr;
    Result result = Plugin::instance().listen(dev, handle, &comm);
    if (result == kSuccess) *listenComm = comm;
    return result;
  });
}

Result connect(int dev, void* handle, void** sendComm, NetDeviceHandle** devComm) noexcept {
  return guarded("connect", [&] {
    if (outputMissing(sendComm, "connect")) return kInternalError;
    if (devComm != nullptr) *devComm = nullptr;
    void* comm = nullptr;
    Result result = Plugin::instance().connect(dev, handle, &comm);
    if (result == kSuccess) *sendComm = comm;
    return result;
  });
}

Result accept(void* listenComm, void** recvComm, NetDeviceHandle** devComm) noexcept {
  return guarded("accept", [&] {
    if (outputMissing(recvComm, "accept")) return kInternalError;
    if (devComm != nullptr) *devComm = nullptr;
    void* comm = nullptr;
    Result result = Plugin::instance().accept(listenComm, &comm);
    if (result == kSuccess) *recvComm = comm;
    return result;
  });
}

Result regMr(void* comm, void* data, size_t size, int type, void** mhandle) noexcept {
  return guarded("regMr", [&] {
    if (outputMissing(mhandle, "regMr")) return kInternalError;
    core::MemoryHandle* handle = nullptr;
    Result result = Plugin::instance().regMr(comm, data, size, type, &handle);
    if (result == kSuccess) *mhandle = handle;
    return result;
  });
}

Result regMrNarrow(void* comm, void* data, int size, int type, void** mhandle) noexcept {
  if (size < 0) {
    NNF_WARN("regMr: invalid size %d", size);
    return kInternalError;
  }
  return regMr(comm, data, static_cast<size_t>(size), type, mhandle);
}

Result regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                   void** mhandle) noexcept {
  return guarded("regMrDmaBuf", [&] {
    if (outputMissing(mhandle, "regMrDmaBuf")) return kInternalError;
    core::MemoryHandle* handle = nullptr;
    Result result = Plugin::instance().regMrDmaBuf(comm, data, size, type, offset, fd, &handle);
    if (result == kSuccess) *mhandle = handle;
    return result;
  });
}

Result deregMr(void* comm, void* mhandle) noexcept {
  return guarded("deregMr", [&] { return Plugin::instance().deregMr(comm, mhandle); });
}

Result isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
             void** request) noexcept {
  return guarded("isend", [&] { return postSend(sendComm, data, size, tag, mhandle, request); });
}

Result isendNarrow(void* sendComm, void* data, int size, int tag, void* mhandle,
                   void** request) noexcept {
  return guarded("isend", [&] {
    if (size < 0) {
      NNF_WARN("isend: invalid size %d", size);
      return kInternalError;
    }
    return postSend(sendComm, data, static_cast<size_t>(size), tag, mhandle, request);
  });
}

Result irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
             void** request) noexcept {
  return guarded("irecv",
                 [&] { return postRecv(recvComm, n, data, sizes, tags, mhandles, request); });
}

Result irecvNarrow(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                   void** request) noexcept {
  return guarded("irecv", [&] {
    if (n < 1 || n > kMaxRequests || sizes == nullptr) {
      NNF_WARN("irecv: invalid count %d or NULL sizes pointer", n);
      return kInternalError;
    }
    size_t wide[kMaxRequests];
    for (int i = 0; i < n; ++i) {
      if (sizes[i] < 0) {
        NNF_WARN("irecv: invalid size %d for buffer %d", sizes[i], i);
        return kInternalError;
      }
      wide[i] = static_cast<size_t>(sizes[i]);
    }
    return postRecv(recvComm, n, data, wide, tags, mhandles, request);
  });
}

Result isendProfiled(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* pHandle,
                     void** request) noexcept {
  return isend(sendComm, data, size, tag, mhandle, request);
}

Result irecvProfiled(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** pHandles, void** request) noexcept {
  return irecv(recvComm, n, data, sizes, tags, mhandles, request);
}

Result iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
              void** request) noexcept {
  return guarded("iflush", [&] {
    if (outputMissing(request, "iflush")) return kInternalError;
    core::Request* req = nullptr;
    Result result = Plugin::instance().iflush(recvComm, n, data, sizes, mhandles, &req);
    if (result == kSuccess) *request = req;
    return result;
  });
}

Result test(void* request, int* done, int* sizes) noexcept {
  return guarded("test", [&] {
    size_t wide[kMaxRequests];
    int count = 0;
    Result result = Plugin::instance().test(request, done, wide, &count);
    if (result == kSuccess && *done && sizes != nullptr) {
      for (int i = 0; i < count; ++i) sizes[i] = reportedSize(wide[i]);
    }
    return result;
  });
}

Result closeSend(void* sendComm) noexcept {
  return guarded("closeSend", [&] { return Plugin::instance().closeSend(sendComm); });
}

Result closeRecv(void* recvComm) noexcept {
  return guarded("closeRecv", [&] { return Plugin::instance().closeRecv(recvComm); });
}

Result closeListen(void* listenComm) noexcept {
  return guarded("closeListen", [&] { return Plugin::instance().closeListen(listenComm); });
}

Result getDeviceMr(void* comm, void* mhandle, void** dptrMhandle) noexcept {
  if (dptrMhandle != nullptr) *dptrMhandle = nullptr;
  return kSuccess;
}

Result irecvConsumed(void* recvComm, int n, void* request) noexcept {
  return kSuccess;
}

}  // namespace nnf::abi::entry
