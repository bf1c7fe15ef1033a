// ncclRmaPlugin_v13: the GIN-era layout (NCCL 2.29's ncclGin_v13_t, which NCCL 2.30 also accepts
// as an RMA plugin). createContext hands back a device handle, regMrSym a GIN handle, iputSignal
// has no strength argument (every signal is strong) and progress is named ginProgress.
#pragma once

#include "nccl_net/net_v12.h"
#include "nccl_rma/common.h"

namespace nnf::abi {

struct GinConfigV13 {
  int nSignals;
  int nCounters;
  int nContexts;
  int queueDepth;
  int trafficClass;
};

struct RmaV13 {
  const char* name;
  Result (*init)(void** ctx, uint64_t commId, Logger logFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, PropertiesV12* props);
  Result (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  Result (*connect)(void* ctx, void* handles[], int nranks, int rank, void* listenComm,
                    void** collComm);
  Result (*createContext)(void* collComm, GinConfigV13* config, void** ginCtx,
                          NetDeviceHandle** devHandle);
  Result (*regMrSym)(void* collComm, void* data, size_t size, int type, uint64_t mrFlags,
                     void** mhandle, void** ginHandle);
  Result (*regMrSymDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset,
                           int fd, uint64_t mrFlags, void** mhandle, void** ginHandle);
  Result (*deregMrSym)(void* collComm, void* mhandle);
  Result (*destroyContext)(void* ginCtx);
  Result (*closeColl)(void* collComm);
  Result (*closeListen)(void* listenComm);
  Result (*iput)(void* ginCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                 uint64_t dstOff, void* dstMhandle, uint32_t rank, void** request);
  Result (*iputSignal)(void* ginCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                       uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                       void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                       void** request);
  Result (*iget)(void* ginCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
                 uint64_t localOff, void* localMhandle, uint32_t rank, void** request);
  Result (*iflush)(void* ginCtx, int context, void* mhandle, uint32_t rank, void** request);
  Result (*test)(void* collComm, void* request, int* done);
  Result (*ginProgress)(void* ginCtx);
  Result (*queryLastError)(void* ginCtx, bool* hasError);
  Result (*finalize)(void* ctx);
};

static_assert(sizeof(GinConfigV13) == 20);
static_assert(offsetof(GinConfigV13, nContexts) == 8);
static_assert(offsetof(GinConfigV13, trafficClass) == 16);
static_assert(sizeof(RmaV13) == 21 * kPtr);
static_assert(offsetof(RmaV13, connect) == 5 * kPtr);
static_assert(offsetof(RmaV13, createContext) == 6 * kPtr);
static_assert(offsetof(RmaV13, closeListen) == 12 * kPtr);
static_assert(offsetof(RmaV13, iputSignal) == 14 * kPtr);
static_assert(offsetof(RmaV13, test) == 17 * kPtr);
static_assert(offsetof(RmaV13, ginProgress) == 18 * kPtr);
static_assert(offsetof(RmaV13, finalize) == 20 * kPtr);

}  // namespace nnf::abi
