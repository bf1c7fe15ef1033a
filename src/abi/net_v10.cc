// ABI v10 (NCCL 2.24 to 2.27): a comm config (traffic class) on connect, a profiler callback at
// init and profiler handles on isend/irecv. We emit no profiler events, so the callback and
// handles are accepted and unused; the traffic class is noted, not applied yet.
#include "abi/convert.h"
#include "abi/entries.h"

namespace nnf::abi {
namespace {

Result connectV10(int dev, CommConfig* config, void* handle, void** sendComm,
                  NetDeviceHandle** sendDevComm) noexcept {
  entry::noteTrafficClass(config, "connect");
  return entry::connect(dev, handle, sendComm, sendDevComm);
}

}  // namespace
}  // namespace nnf::abi

extern "C" __attribute__((visibility("default"))) nnf::abi::NetV10 ncclNetPlugin_v10;

nnf::abi::NetV10 ncclNetPlugin_v10 = {
    "Fabric",
    nnf::abi::entry::initWithProfiler,
    nnf::abi::entry::devices,
    nnf::abi::getProperties<10, nnf::abi::PropertiesV10>,
    nnf::abi::entry::listen,
    nnf::abi::connectV10,
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
};
