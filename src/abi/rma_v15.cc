// ncclRmaPlugin_v15 (NCCL 2.31): v14 with optFlags on iput, iputSignal and iget. The aggregate
// hint (more operations follow at once) changes nothing here: every operation is handed to the
// provider when it is issued.
#include "abi/rma_entries.h"

namespace {

using namespace nnf::abi;

Result getProperties(int dev, PropertiesV12* props) noexcept {
  return rma_entry::properties(dev, props, false);
}

Result createContext(void* collComm, RmaConfigV15* config, void** rmaCtx) noexcept {
  return rma_entry::createContext(collComm, config != nullptr ? config->nContexts : 1, rmaCtx);
}

Result iput(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
            uint64_t dstOff, void* dstMhandle, uint32_t rank, uint32_t optFlags,
            void** request) noexcept {
  return rma_entry::iput(rmaCtx, context, srcOff, srcMhandle, size, dstOff, dstMhandle, rank,
                         request);
}

Result iputSignal(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                  uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                  void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                  bool isStrongSignal, uint32_t optFlags, void** request) noexcept {
  return rma_entry::iputSignal(rmaCtx, context, srcOff, srcMhandle, size, dstOff, dstMhandle,
                               rank, signalOff, signalMhandle, signalValue, signalOp,
                               isStrongSignal, request);
}

Result iget(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
            uint64_t localOff, void* localMhandle, uint32_t rank, uint32_t optFlags,
            void** request) noexcept {
  return rma_entry::iget(rmaCtx, context, remoteOff, remoteMhandle, size, localOff, localMhandle,
                         rank, request);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) nnf::abi::RmaV15 ncclRmaPlugin_v15;

nnf::abi::RmaV15 ncclRmaPlugin_v15 = {
    "Fabric",
    rma_entry::init,
    rma_entry::devices,
    getProperties,
    rma_entry::listen,
    rma_entry::connect,
    createContext,
    rma_entry::regMrSym,
    rma_entry::regMrSymDmaBuf,
    rma_entry::deregMrSym,
    rma_entry::destroyContext,
    rma_entry::closeColl,
    rma_entry::closeListen,
    iput,
    iputSignal,
    iget,
    rma_entry::iflush,
    rma_entry::test,
    rma_entry::progress,
    rma_entry::queryLastError,
    rma_entry::finalize,
};
