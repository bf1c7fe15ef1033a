// ABI v12 (NCCL 2.30): v11 with railId/planeId (rail = device index, as devices are planned one
// per GPU; plane undefined) and up to eight devices per virtual NIC (we make none).
#include "abi/convert.h"
#include "abi/entries.h"

extern "C" __attribute__((visibility("default"))) nnf::abi::NetV12 ncclNetPlugin_v12;

nnf::abi::NetV12 ncclNetPlugin_v12 = {
    "Fabric",
    nnf::abi::entry::initContext,
    nnf::abi::entry::devices,
    nnf::abi::getProperties<12, nnf::abi::PropertiesV12>,
    nnf::abi::entry::listenInContext,
    nnf::abi::entry::connectInContext,
    nnf::abi::entry::accept,
    nnf::abi::entry::regMr,
    nnf::abi::entry::regMrDmaBuf,
    nnf::abi::entry::deregMr,
    nnf::abi::entry::isendProfiled,
    nnf::abi::entry::irecvProfiled,
    nnf::abi::entry::iflush,
    nnf::abi::entry::test,
    nnf::abi::entry::closeSend,
    nnf::abi::entry::closeRecv,
    nnf::abi::entry::closeListen,
    nnf::abi::entry::getDeviceMr,
    nnf::abi::entry::irecvConsumed,
    nullptr,  // makeVDevice: see net_v9.cc
    nnf::abi::entry::finalize,
    nnf::abi::entry::setNetAttr,
};
