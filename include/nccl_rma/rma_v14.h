// ncclRmaPlugin_v14 (NCCL 2.30): the RMA table proper. Contexts come from an RMA config (no
// device handle), registrations return one handle, iputSignal says whether the signal is strong.
#pragma once

#include "nccl_net/net_v12.h"
#include "nccl_rma/common.h"

namespace nnf::abi {

struct RmaConfigV14 {
  int nContexts;
  int trafficClass;
  int rankStride;
};
using RmaConfigV15 = RmaConfigV14;  // unchanged in v15

struct RmaV14 {
  const char* name;
  Result (*init)(void** ctx, uint64_t commId, Logger logFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, PropertiesV12* props);
  Result (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  Result (*connect)(void* ctx, void* handles[], int nranks, int rank, void* listenComm,
                    void** collComm);
  Result (*createContext)(void* collComm, RmaConfigV14* config, void** rmaCtx);
  Result (*regMrSym)(void* collComm, void* data, size_t size, int type, uint64_t mrFlags,
                     void** mhandle);
  Result (*regMrSymDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset,
                           int fd, uint64_t mrFlags, void** mhandle);
  Result (*deregMrSym)(void* collComm, void* mhandle);
  Result (*destroyContext)(void* rmaCtx);
  Result (*closeColl)(void* collComm);
  Result (*closeListen)(void* listenComm);
  Result (*iput)(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                 uint64_t dstOff, void* dstMhandle, uint32_t rank, void** request);
  Result (*iputSignal)(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                       uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                       void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                       bool isStrongSignal, void** request);
  Result (*iget)(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
                 uint64_t localOff, void* localMhandle, uint32_t rank, void** request);
  Result (*iflush)(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request);
  Result (*test)(void* collComm, void* request, int* done);
  Result (*rmaProgress)(void* rmaCtx);
  Result (*queryLastError)(void* rmaCtx, bool* hasError);
  Result (*finalize)(void* ctx);
};

static_assert(sizeof(RmaConfigV14) == 12);
static_assert(offsetof(RmaConfigV14, rankStride) == 8);
static_assert(sizeof(RmaV14) == 21 * kPtr);
static_assert(offsetof(RmaV14, createContext) == 6 * kPtr);
static_assert(offsetof(RmaV14, iput) == 13 * kPtr);
static_assert(offsetof(RmaV14, iputSignal) == 14 * kPtr);
static_assert(offsetof(RmaV14, rmaProgress) == 18 * kPtr);
static_assert(offsetof(RmaV14, queryLastError) == 19 * kPtr);
static_assert(offsetof(RmaV14, finalize) == 20 * kPtr);

}  // namespace nnf::abi
