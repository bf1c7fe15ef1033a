// ABI v11 (NCCL 2.28): a context per NCCL communicator from init (its comm config carries the
// traffic class, noted and not applied yet), listen/connect in that context, finalize, and
// setNetAttr hints (kept, unused). maxMultiRequestSize 1: no multi-requests.
#include "abi/convert.h"
#include "abi/entries.h"

extern "C" __attribute__((visibility("default"))) nnf::abi::NetV11 ncclNetPlugin_v11;

nnf::abi::NetV11 ncclNetPlugin_v11 = {
    "Fabric",
    nnf::abi::entry::initContext,
    nnf::abi::entry::devices,
    nnf::abi::getProperties<11, nnf::abi::PropertiesV11>,
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
