// The RMA entry points: outputs checked at the edge, then rma::Api, behind the firewall.
#include "abi/rma_entries.h"

#include "abi/convert.h"
#include "log/log.h"
#include "rma/api.h"
#include "rma/wire.h"

namespace nnf::abi::rma_entry {
namespace {

using rma::Api;

static_assert(rma::kSignalOpInc == kSignalOpInc && rma::kSignalOpAdd == kSignalOpAdd);
static_assert(rma::kMrFlagSignalNeverReset == kMrFlagSignalNeverReset);

}  // namespace

Result init(void** ctx, uint64_t commId, Logger logger) noexcept {
  return guarded("RMA init", [&] { return Api::instance().init(ctx, commId, logger); });
}

Result devices(int* ndev) noexcept {
  return guarded("RMA devices", [&] { return Api::instance().devices(ndev); });
}

Result properties(int dev, PropertiesV12* props, bool proxy) noexcept {
  return guarded("RMA getProperties", [&] {
    if (props == nullptr) {
      NNF_WARN("RMA getProperties: NULL properties pointer");
      return kInternalError;
    }
    const core::DeviceProperties* core = nullptr;
    Result result = Api::instance().properties(dev, &core);
    if (result != kSuccess) return result;
    convertProperties<12>(dev, *core, props);
    // NCCL 2.30 takes a v13 table (the GIN-era layout) only from a GIN proxy backend: NCCL's
    // proxy drives the GPU side, we the host side.
    if (proxy) props->netDeviceType = kNetDeviceGinProxy;
    return kSuccess;
  });
}

Result listen(void* ctx, int dev, void* handle, void** listenComm) noexcept {
  return guarded("RMA listen",
                 [&] { return Api::instance().listen(ctx, dev, handle, listenComm); });
}

Result connect(void* ctx, void* handles[], int nranks, int rank, void* listenComm,
               void** collComm) noexcept {
  return guarded("RMA connect", [&] {
    return Api::instance().connect(ctx, handles, nranks, rank, listenComm, collComm);
  });
}

Result createContext(void* collComm, int streams, void** rmaCtx) noexcept {
  return guarded("RMA createContext",
                 [&] { return Api::instance().createContext(collComm, streams, rmaCtx); });
}

Result regMrSym(void* collComm, void* data, size_t size, int type, uint64_t mrFlags,
                void** mhandle) noexcept {
  return guarded("RMA regMrSym", [&] {
    return Api::instance().regMrSym(collComm, data, size, type, 0, -1, mrFlags, mhandle);
  });
}

Result regMrSymDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                      uint64_t mrFlags, void** mhandle) noexcept {
  return guarded("RMA regMrSymDmaBuf", [&] {
    if (fd < 0) {
      NNF_WARN("RMA regMrSymDmaBuf: invalid file descriptor %d", fd);
      return kInternalError;
    }
    return Api::instance().regMrSym(collComm, data, size, type, offset, fd, mrFlags, mhandle);
  });
}

Result deregMrSym(void* collComm, void* mhandle) noexcept {
  return guarded("RMA deregMrSym",
                 [&] { return Api::instance().deregMrSym(collComm, mhandle); });
}

Result destroyContext(void* rmaCtx) noexcept {
  return guarded("RMA destroyContext", [&] { return Api::instance().destroyContext(rmaCtx); });
}

Result closeColl(void* collComm) noexcept {
  return guarded("RMA closeColl", [&] { return Api::instance().closeColl(collComm); });
}

Result closeListen(void* listenComm) noexcept {
  return guarded("RMA closeListen", [&] { return Api::instance().closeListen(listenComm); });
}

Result iput(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
            uint64_t dstOff, void* dstMhandle, uint32_t rank, void** request) noexcept {
  return guarded("RMA iput", [&] {
    return Api::instance().put(rmaCtx, context, srcOff, srcMhandle, size, dstOff, dstMhandle,
                               rank, nullptr, request);
  });
}

Result iputSignal(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                  uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                  void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                  bool isStrongSignal, void** request) noexcept {
  return guarded("RMA iputSignal", [&] {
    rma::SignalSpec signal{signalOff, signalMhandle, signalValue, signalOp, isStrongSignal};
    return Api::instance().put(rmaCtx, context, srcOff, srcMhandle, size, dstOff, dstMhandle,
                               rank, &signal, request);
  });
}

Result iget(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
            uint64_t localOff, void* localMhandle, uint32_t rank, void** request) noexcept {
  return guarded("RMA iget", [&] {
    return Api::instance().get(rmaCtx, context, remoteOff, remoteMhandle, size, localOff,
                               localMhandle, rank, request);
  });
}

Result iflush(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request) noexcept {
  return guarded("RMA iflush",
                 [&] { return Api::instance().flush(rmaCtx, context, mhandle, rank, request); });
}

Result test(void* collComm, void* request, int* done) noexcept {
  return guarded("RMA test", [&] { return Api::instance().test(collComm, request, done); });
}

Result progress(void* rmaCtx) noexcept {
  return guarded("RMA rmaProgress", [&] { return Api::instance().progress(rmaCtx); });
}

Result queryLastError(void* rmaCtx, bool* hasError) noexcept {
  return guarded("RMA queryLastError",
                 [&] { return Api::instance().queryLastError(rmaCtx, hasError); });
}

Result finalize(void* ctx) noexcept {
  return guarded("RMA finalize", [&] { return Api::instance().finalize(ctx); });
}

}  // namespace nnf::abi::rma_entry
