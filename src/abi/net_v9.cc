// ABI v9 (NCCL 2.23): size_t message sizes (messages above the provider's limit are refused by
// the core), maxP2pBytes/maxCollBytes, forceFlush, and virtual devices. makeVDevice is NULL: our
// plan already makes one device of a GPU's NICs (multi-rail), so NCCL has nothing to fuse.
#include "abi/convert.h"
#include "abi/entries.h"

extern "C" __attribute__((visibility("default"))) nnf::abi::NetV9 ncclNetPlugin_v9;

nnf::abi::NetV9 ncclNetPlugin_v9 = {
    "Fabric",
    nnf::abi::entry::init,
    nnf::abi::entry::devices,
    nnf::abi::getProperties<9, nnf::abi::PropertiesV9>,
    nnf::abi::entry::listen,
    nnf::abi::entry::connect,
    nnf::abi::entry::accept,
    nnf::abi::entry::regMr,
    nnf::abi::entry::regMrDmaBuf,
    nnf::abi::entry::deregMr,
    nnf::abi::entry::isend,
    nnf::abi::entry::irecv,
    nnf::abi::entry::iflush,
    nnf::abi::entry::test,
    nnf::abi::entry::closeSend,
    nnf::abi::entry::closeRecv,
    nnf::abi::entry::closeListen,
    nnf::abi::entry::getDeviceMr,
    nnf::abi::entry::irecvConsumed,
    nullptr,  // makeVDevice
};
