// ABI v8 (NCCL 2.19 to 2.22): v7 plus regIsGlobal and a size_t regMr; messages still int sized.
#include "abi/convert.h"
#include "abi/entries.h"

extern "C" __attribute__((visibility("default"))) nnf::abi::NetV8 ncclNetPlugin_v8;

nnf::abi::NetV8 ncclNetPlugin_v8 = {
    "Fabric",
    nnf::abi::entry::init,
    nnf::abi::entry::devices,
    nnf::abi::getProperties<8, nnf::abi::PropertiesV8>,
    nnf::abi::entry::listen,
    nnf::abi::entry::connect,
    nnf::abi::entry::accept,
    nnf::abi::entry::regMr,
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
