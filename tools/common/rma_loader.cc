#include "rma_loader.h"

#include <dlfcn.h>

#include <string>

#include "plugin_loader.h"

namespace nnf::tools {
namespace {

using abi::Result;

// What v13 and v14 tables share in v15's shape: iput and iget only drop v15's option flags
// (neither has any), and the entries v15 kept as they were are copied.
template <typename Table>
struct WithoutOptionFlags {
  static inline const Table* rma = nullptr;

  static Result iput(void* ctx, int context, uint64_t srcOff, void* src, size_t size,
                     uint64_t dstOff, void* dst, uint32_t rank, uint32_t, void** request) {
    return rma->iput(ctx, context, srcOff, src, size, dstOff, dst, rank, request);
  }
  static Result iget(void* ctx, int context, uint64_t remoteOff, void* remote, size_t size,
                     uint64_t localOff, void* local, uint32_t rank, uint32_t, void** request) {
    return rma->iget(ctx, context, remoteOff, remote, size, localOff, local, rank, request);
  }

  // v15's table with those entries of `table`; the caller fills in the rest.
  static abi::RmaV15 shapeShared(const Table* table) {
    rma = table;
    abi::RmaV15 shaped{};
    shaped.name = rma->name;
    shaped.devices = rma->devices;
    shaped.getProperties = rma->getProperties;
    shaped.listen = rma->listen;
    shaped.connect = rma->connect;
    shaped.deregMrSym = rma->deregMrSym;
    shaped.destroyContext = rma->destroyContext;
    shaped.closeColl = rma->closeColl;
    shaped.closeListen = rma->closeListen;
    shaped.iput = iput;
    shaped.iget = iget;
    shaped.iflush = rma->iflush;
    shaped.test = rma->test;
    shaped.queryLastError = rma->queryLastError;
    shaped.finalize = rma->finalize;
    return shaped;
  }
};

// v14 in v15's shape: the option flags are dropped (v14 has none).
struct V14 : WithoutOptionFlags<abi::RmaV14> {
  static Result iputSignal(void* ctx, int context, uint64_t srcOff, void* src, size_t size,
                           uint64_t dstOff, void* dst, uint32_t rank, uint64_t signalOff,
                           void* signal, uint64_t value, uint32_t op, bool strong, uint32_t,
                           void** request) {
    return rma->iputSignal(ctx, context, srcOff, src, size, dstOff, dst, rank, signalOff, signal,
                           value, op, strong, request);
  }

  static const abi::RmaV15* adapt(const abi::RmaV14* table) {
    static abi::RmaV15 shaped{};
    shaped = shapeShared(table);
    shaped.init = rma->init;
    shaped.createContext = rma->createContext;
    shaped.regMrSym = rma->regMrSym;
    shaped.regMrSymDmaBuf = rma->regMrSymDmaBuf;
    shaped.iputSignal = iputSignal;
    shaped.rmaProgress = rma->rmaProgress;
    return &shaped;
  }
};

// v13 (the GIN-era layout) in v15's shape, as NCCL 2.30's rma_v13.cc adapts it: the config
// carries nContexts and the traffic class, the device handle and GIN handles are dropped, and
// every v13 signal is strong.
struct V13 : WithoutOptionFlags<abi::RmaV13> {
  static Result init(void** ctx, uint64_t commId, abi::Logger logger) {
    Result result = rma->init(ctx, commId, logger);
    if (result != abi::kSuccess) return result;
    abi::PropertiesV12 props{};
    result = rma->getProperties(0, &props);
    if (result != abi::kSuccess) return result;
    // NCCL refuses a v13 RMA plugin that is not a GIN proxy backend.
    return props.netDeviceType == abi::kNetDeviceGinProxy ? abi::kSuccess : abi::kInternalError;
  }
  static Result createContext(void* collComm, abi::RmaConfigV15* config, void** rmaCtx) {
    abi::GinConfigV13 gin{};
    gin.nContexts = config->nContexts;
    gin.trafficClass = config->trafficClass;
    abi::NetDeviceHandle* devHandle = nullptr;
    return rma->createContext(collComm, &gin, rmaCtx, &devHandle);
  }
  static Result regMrSym(void* collComm, void* data, size_t size, int type, uint64_t flags,
                         void** mhandle) {
    void* ginHandle = nullptr;
    return rma->regMrSym(collComm, data, size, type, flags, mhandle, &ginHandle);
  }
  static Result regMrSymDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset,
                               int fd, uint64_t flags, void** mhandle) {
    void* ginHandle = nullptr;
    return rma->regMrSymDmaBuf(collComm, data, size, type, offset, fd, flags, mhandle, &ginHandle);
  }
  static Result iputSignal(void* ctx, int context, uint64_t srcOff, void* src, size_t size,
                           uint64_t dstOff, void* dst, uint32_t rank, uint64_t signalOff,
                           void* signal, uint64_t value, uint32_t op, bool, uint32_t,
                           void** request) {
    return rma->iputSignal(ctx, context, srcOff, src, size, dstOff, dst, rank, signalOff, signal,
                           value, op, request);
  }

  static const abi::RmaV15* adapt(const abi::RmaV13* table) {
    static abi::RmaV15 shaped{};
    shaped = shapeShared(table);
    shaped.init = init;
    shaped.createContext = createContext;
    shaped.regMrSym = regMrSym;
    shaped.regMrSymDmaBuf = regMrSymDmaBuf;
    shaped.iputSignal = iputSignal;
    shaped.rmaProgress = rma->ginProgress;
    return &shaped;
  }
};

}  // namespace

const abi::RmaV15* findRma(void* library, int version, RmaLookup lookup, int* found,
                           std::string* why) {
  int newest = lookup == RmaLookup::kNccl231 ? 15 : 14;
  int from = version != 0 ? version : newest;
  int to = version != 0 ? version : kOldestRmaAbi;
  for (int v = from; v >= to; --v) {
    void* table = dlsym(library, ("ncclRmaPlugin_v" + std::to_string(v)).c_str());
    if (table == nullptr) continue;
    *found = v;
    switch (v) {
      case 15:
        return static_cast<const abi::RmaV15*>(table);
      case 14:
        return V14::adapt(static_cast<const abi::RmaV14*>(table));
      case 13:
        return V13::adapt(static_cast<const abi::RmaV13*>(table));
    }
  }
  *why = version != 0 ? "no ncclRmaPlugin_v" + std::to_string(version)
                      : "none of ncclRmaPlugin_v" + std::to_string(newest) + " to _v13";
  return nullptr;
}

int rmaVersionFromEnv(const char* variable) {
  return versionFromEnv(variable, "an RMA ABI version", kOldestRmaAbi, kNewestRmaAbi);
}

}  // namespace nnf::tools
