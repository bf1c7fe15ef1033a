// ncclRmaPlugin_v15 (NCCL 2.31): v14 with a uint32_t optFlags before the request of iput,
// iputSignal and iget (kRmaOptAggregateRequests: more operations follow at once). As vendored by
// aws-ofi-nccl (3rd-party/nccl/cuda/include/nccl/rma_v15.h).
#pragma once

#include "nccl_rma/rma_v14.h"

namespace nnf::abi {

struct RmaV15 {
  const char* name;
  Result (*init)(void** ctx, uint64_t commId, Logger logFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, PropertiesV12* props);
  Result (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  Result (*connect)(void* ctx, void* handles[], int nranks, int rank, void* listenComm,
                    void** collComm);
  Result (*createContext)(void* collComm, RmaConfigV15* config, void** rmaCtx);
  Result (*regMrSym)(void* collComm, void* data, size_t size, int type, uint64_t mrFlags,
                     void** mhandle);
  Result (*regMrSymDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset,
                           int fd, uint64_t mrFlags, void** mhandle);
  Result (*deregMrSym)(void* collComm, void* mhandle);
  Result (*destroyContext)(void* rmaCtx);
  Result (*closeColl)(void* collComm);
  Result (*closeListen)(void* listenComm);
  Result (*iput)(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                 uint64_t dstOff, void* dstMhandle, uint32_t rank, uint32_t optFlags,
                 void** request);
  Result (*iputSignal)(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                       uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                       void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                       bool isStrongSignal, uint32_t optFlags, void** request);
  Result (*iget)(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
                 uint64_t localOff, void* localMhandle, uint32_t rank, uint32_t optFlags,
                 void** request);
  Result (*iflush)(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request);
  Result (*test)(void* collComm, void* request, int* done);
  Result (*rmaProgress)(void* rmaCtx);
  Result (*queryLastError)(void* rmaCtx, bool* hasError);
  Result (*finalize)(void* ctx);
};

static_assert(sizeof(RmaV15) == 21 * kPtr);
static_assert(offsetof(RmaV15, iput) == 13 * kPtr);
static_assert(offsetof(RmaV15, iget) == 15 * kPtr);
static_assert(offsetof(RmaV15, iflush) == 16 * kPtr);
static_assert(offsetof(RmaV15, finalize) == 20 * kPtr);

}  // namespace nnf::abi
