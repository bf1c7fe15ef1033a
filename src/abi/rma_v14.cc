// ncclRmaPlugin_v14 (NCCL 2.30): the RMA table NCCL looks for first in the net plugin library.
#include "abi/rma_entries.h"
#include "abi/convert.h"

namespace {

using namespace nnf::abi;

Result getProperties(int dev, PropertiesV12* props) noexcept {
  return rma_entry::properties(dev, props, false);
}

Result createContext(void* collComm, RmaConfigV14* config, void** rmaCtx) noexcept {
  // The traffic class is not applied (no libfabric traffic class is set, as for the net comms);
  // the rank stride is a hint for plugins that spread ranks over NICs: our ranks use one device.
  return rma_entry::createContext(collComm, config != nullptr ? config->nContexts : 1, rmaCtx);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) nnf::abi::RmaV14 ncclRmaPlugin_v14;

nnf::abi::RmaV14 ncclRmaPlugin_v14 = {
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
    rma_entry::iput,
    rma_entry::iputSignal,
    rma_entry::iget,
    rma_entry::iflush,
    rma_entry::test,
    rma_entry::progress,
    rma_entry::queryLastError,
    rma_entry::finalize,
};
