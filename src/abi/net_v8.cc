// ABI shim for NCCL net plugin v8: converts v8 types into the version-neutral core and back.
// Every exported function is a noexcept firewall: nothing escapes into NCCL.
#include "abi/nccl_abi.h"
#include "core/device.h"
#include "core/plugin.h"
#include "log/log.h"

namespace nnf::abi {
namespace {

using core::Plugin;

// Output pointers are checked here: the core writes into our locals, so it cannot see them.
bool outputMissing(const void* out, const char* entry) {
  if (out != nullptr) return false;
  NNF_WARN("%s: NULL output pointer", entry);
  return true;
}

template <typename Body>
Result guarded(const char* entry, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& error) {
    NNF_WARN("%s: unexpected error: %s", entry, error.what());
  } catch (...) {
    NNF_WARN("%s: unexpected error", entry);
  }
  return kInternalError;
}

Result init(Logger logger) {
  return guarded("init", [&] { return Plugin::instance().init(logger); });
}

Result devices(int* count) {
  return guarded("devices", [&] { return Plugin::instance().deviceCount(count); });
}

Result getProperties(int dev, PropertiesV8* props) {
  return guarded("getProperties", [&] {
    const core::DeviceProperties* core = nullptr;
    Result result = Plugin::instance().properties(dev, &core);
    if (result != kSuccess) return result;
    if (props == nullptr) {
      NNF_WARN("getProperties: NULL properties pointer");
      return kInternalError;
    }
    props->name = const_cast<char*>(core->name.c_str());
    props->pciPath = core->pciPath.empty() ? nullptr : const_cast<char*>(core->pciPath.c_str());
    props->guid = core->guid;
    props->ptrSupport = core->ptrSupport;
    props->regIsGlobal = core->regIsGlobal;
    props->speed = core->speedMbps;
    props->port = core->port;
    props->latency = core->latencyUs;
    props->maxComms = core->maxComms;
    props->maxRecvs = core->maxRecvs;
    props->netDeviceType = kNetDeviceHost;
    props->netDeviceVersion = 0;
    return kSuccess;
  });
}

Result listen(int dev, void* handle, void** listenComm) {
  return guarded("listen", [&] {
    if (outputMissing(listenComm, "listen")) return kInternalError;
    void* comm = nullptr;
    Result result = Plugin::instance().listen(dev, handle, &comm);
    if (result == kSuccess) *listenComm = comm;
    return result;
  });
}

Result connect(int dev, void* handle, void** sendComm, NetDeviceHandleV8** sendDevComm) {
  return guarded("connect", [&] {
    if (outputMissing(sendComm, "connect")) return kInternalError;
    void* comm = nullptr;
    Result result = Plugin::instance().connect(dev, handle, &comm);
    if (result == kSuccess) *sendComm = comm;
    return result;
  });
}

Result accept(void* listenComm, void** recvComm, NetDeviceHandleV8** recvDevComm) {
  return guarded("accept", [&] {
    if (outputMissing(recvComm, "accept")) return kInternalError;
    void* comm = nullptr;
    Result result = Plugin::instance().accept(listenComm, &comm);
    if (result == kSuccess) *recvComm = comm;
    return result;
  });
}

Result regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return guarded("regMr", [&] {
    if (outputMissing(mhandle, "regMr")) return kInternalError;
    core::MemoryHandle* handle = nullptr;
    Result result = Plugin::instance().regMr(comm, data, size, type, &handle);
    if (result == kSuccess) *mhandle = handle;
    return result;
  });
}

Result regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                   void** mhandle) {
  return guarded("regMrDmaBuf", [&] {
    if (outputMissing(mhandle, "regMrDmaBuf")) return kInternalError;
    core::MemoryHandle* handle = nullptr;
    Result result = Plugin::instance().regMrDmaBuf(comm, data, size, type, offset, fd, &handle);
    if (result == kSuccess) *mhandle = handle;
    return result;
  });
}

Result deregMr(void* comm, void* mhandle) {
  return guarded("deregMr", [&] { return Plugin::instance().deregMr(comm, mhandle); });
}

Result isend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  return guarded("isend", [&] {
    if (size < 0 || request == nullptr) {
      NNF_WARN("isend: invalid size %d or NULL request pointer", size);
      return kInternalError;
    }
    core::Request* req = nullptr;
    Result result =
        Plugin::instance().isend(sendComm, data, static_cast<size_t>(size), tag, mhandle, &req);
    if (result == kSuccess) *request = req;
    return result;
  });
}

Result irecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
             void** request) {
  return guarded("irecv", [&] {
    if (n < 1 || n > kMaxRequests || sizes == nullptr || request == nullptr) {
      NNF_WARN("irecv: invalid count %d or NULL sizes/request pointer", n);
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
    core::Request* req = nullptr;
    Result result = Plugin::instance().irecv(recvComm, n, data, wide, tags, mhandles, &req);
    if (result == kSuccess) *request = req;
    return result;
  });
}

Result iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return guarded("iflush", [&] {
    if (outputMissing(request, "iflush")) return kInternalError;
    core::Request* req = nullptr;
    Result result = Plugin::instance().iflush(recvComm, n, data, sizes, mhandles, &req);
    if (result == kSuccess) *request = req;
    return result;
  });
}

Result test(void* request, int* done, int* sizes) {
  return guarded("test", [&] {
    size_t wide[kMaxRequests];
    int count = 0;
    Result result = Plugin::instance().test(request, done, wide, &count);
    if (result == kSuccess && *done && sizes != nullptr) {
      for (int i = 0; i < count; ++i) sizes[i] = static_cast<int>(wide[i]);
    }
    return result;
  });
}

Result closeSend(void* sendComm) {
  return guarded("closeSend", [&] { return Plugin::instance().closeSend(sendComm); });
}

Result closeRecv(void* recvComm) {
  return guarded("closeRecv", [&] { return Plugin::instance().closeRecv(recvComm); });
}

Result closeListen(void* listenComm) {
  return guarded("closeListen", [&] { return Plugin::instance().closeListen(listenComm); });
}

Result getDeviceMr(void* comm, void* mhandle, void** dptrMhandle) {
  // No device-side networking (netDeviceType HOST): there is nothing to hand to GPU code.
  if (dptrMhandle != nullptr) *dptrMhandle = nullptr;
  return kSuccess;
}

Result irecvConsumed(void* recvComm, int n, void* request) {
  return kSuccess;  // only meaningful for device offload, which we do not advertise
}

}  // namespace
}  // namespace nnf::abi

extern "C" {
__attribute__((visibility("default"))) extern nnf::abi::NetV8 ncclNetPlugin_v8;
}

nnf::abi::NetV8 ncclNetPlugin_v8 = {
    "Fabric",
    nnf::abi::init,
    nnf::abi::devices,
    nnf::abi::getProperties,
    nnf::abi::listen,
    nnf::abi::connect,
    nnf::abi::accept,
    nnf::abi::regMr,
    nnf::abi::regMrDmaBuf,
    nnf::abi::deregMr,
    nnf::abi::isend,
    nnf::abi::irecv,
    nnf::abi::iflush,
    nnf::abi::test,
    nnf::abi::closeSend,
    nnf::abi::closeRecv,
    nnf::abi::closeListen,
    nnf::abi::getDeviceMr,
    nnf::abi::irecvConsumed,
};
