// ncclRmaPlugin_v13: the GIN-era layout (ncclGin_v13_t), which NCCL 2.30 accepts as an RMA
// plugin when getProperties reports the GIN proxy device type. We are its host side only:
// createContext hands back a device handle saying so (NCCL's RMA wrapper ignores it), the GIN
// handle of a registration is the registration itself, and every signal is strong (v13 has no
// weak ones). We export no ncclGinPlugin_v13: NCCL would take that for a full GIN plugin.
#include "abi/rma_entries.h"

namespace {

using namespace nnf::abi;

Result getProperties(int dev, PropertiesV12* props) noexcept {
  return rma_entry::properties(dev, props, true);
}

// What the device side would need: nothing of ours (NCCL's proxy queues carry the requests).
NetDeviceHandle proxyHandle = {kNetDeviceGinProxy, 0, nullptr, 0, 1};

Result createContext(void* collComm, GinConfigV13* config, void** ginCtx,
                     NetDeviceHandle** devHandle) noexcept {
  Result result =
      rma_entry::createContext(collComm, config != nullptr ? config->nContexts : 1, ginCtx);
  if (result == kSuccess && devHandle != nullptr) *devHandle = &proxyHandle;
  return result;
}

Result regMrSym(void* collComm, void* data, size_t size, int type, uint64_t mrFlags,
                void** mhandle, void** ginHandle) noexcept {
  Result result = rma_entry::regMrSym(collComm, data, size, type, mrFlags, mhandle);
  if (result == kSuccess && ginHandle != nullptr) *ginHandle = *mhandle;
  return result;
}

Result regMrSymDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                      uint64_t mrFlags, void** mhandle, void** ginHandle) noexcept {
  Result result =
      rma_entry::regMrSymDmaBuf(collComm, data, size, type, offset, fd, mrFlags, mhandle);
  if (result == kSuccess && ginHandle != nullptr) *ginHandle = *mhandle;
  return result;
}

Result iputSignal(void* ginCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                  uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                  void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                  void** request) noexcept {
  return rma_entry::iputSignal(ginCtx, context, srcOff, srcMhandle, size, dstOff, dstMhandle,
                               rank, signalOff, signalMhandle, signalValue, signalOp, true,
                               request);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) nnf::abi::RmaV13 ncclRmaPlugin_v13;

nnf::abi::RmaV13 ncclRmaPlugin_v13 = {
    "Fabric",
    rma_entry::init,
    rma_entry::devices,
    getProperties,
    rma_entry::listen,
    rma_entry::connect,
    createContext,
    regMrSym,
    regMrSymDmaBuf,
    rma_entry::deregMrSym,
    rma_entry::destroyContext,
    rma_entry::closeColl,
    rma_entry::closeListen,
    rma_entry::iput,
    iputSignal,
    rma_entry::iget,
    rma_entry::iflush,
    rma_entry::test,
    rma_entry::progress,
    rma_entry::queryLastError,
    rma_entry::finalize,
};
