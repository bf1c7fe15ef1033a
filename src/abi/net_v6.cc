// ABI v6 (NCCL 2.12 to 2.18, still in older PyTorch containers): int sizes, no device offload
// entry points, no device handles on connect/accept.
#include "abi/convert.h"
#include "abi/entries.h"

namespace nnf::abi {
namespace {

Result connectV6(int dev, void* handle, void** sendComm) noexcept {
  return entry::connect(dev, handle, sendComm, nullptr);
}

Result acceptV6(void* listenComm, void** recvComm) noexcept {
  return entry::accept(listenComm, recvComm, nullptr);
}

}  // namespace
}  // namespace nnf::abi

extern "C" __attribute__((visibility("default"))) nnf::abi::NetV6 ncclNetPlugin_v6;

nnf::abi::NetV6 ncclNetPlugin_v6 = {
    "Fabric",
    nnf::abi::entry::init,
    nnf::abi::entry::devices,
    nnf::abi::getProperties<6, nnf::abi::PropertiesV6>,
    nnf::abi::entry::listen,
    nnf::abi::connectV6,
    nnf::abi::acceptV6,
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
};
