// ABI v7 (NCCL 2.19): v6 plus device-offload fields and entry points (we offer none), still int
// sizes for regMr, isend and irecv.
#include "abi/convert.h"
#include "abi/entries.h"

extern "C" __attribute__((visibility("default"))) nnf::abi::NetV7 ncclNetPlugin_v7;

nnf::abi::NetV7 ncclNetPlugin_v7 = {
    "Fabric",
    nnf::abi::entry::init,
    nnf::abi::entry::devices,
    nnf::abi::getProperties<7, nnf::abi::PropertiesV7>,
    nnf::abi::entry::listen,
    nnf::abi::entry::connect,
    nnf::abi::entry::accept,
    nnf::abi::entry::regMrNarrow,
    nnf::abi::entry::regMrDmaBuf,
    nnf::abi::entry::deregMr,
    nnf::abi::entry::isendNarrow,
    nnf::abi::entry::irecvNarrow,
    nnf::abi::entry::iflush,
    nnf::abi::entry::test,
    nnf::abi::entry::closeSend,
    nnf::abi::entry::closeRecv,
    nnf::abi::entry::closeListen,
    nnf::abi::entry::getDeviceMr,
    nnf::abi::entry::irecvConsumed,
};
