// Entry points shared by the ABI versions, each one noexcept firewall into the core. Where a
// version's signature matches, its table points here directly; otherwise its shim converts the
// arguments (narrow int sizes, extra handles, contexts) and calls the matching one below.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_net/net.h"

namespace nnf::abi::entry {

Result init(Logger logger) noexcept;
// v10+: the profiler callback is accepted and unused (we emit no network events).
Result initWithProfiler(Logger logger, ProfilerCallback profiler) noexcept;
Result devices(int* count) noexcept;

Result listen(int dev, void* handle, void** listenComm) noexcept;
// `devComm` (v7+) is set to NULL when given: host-side networking has no device handle.
Result connect(int dev, void* handle, void** sendComm, NetDeviceHandle** devComm) noexcept;
Result accept(void* listenComm, void** recvComm, NetDeviceHandle** devComm) noexcept;

Result regMr(void* comm, void* data, size_t size, int type, void** mhandle) noexcept;
Result regMrNarrow(void* comm, void* data, int size, int type, void** mhandle) noexcept;  // v6, v7
Result regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                   void** mhandle) noexcept;
Result deregMr(void* comm, void* mhandle) noexcept;

Result isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
             void** request) noexcept;
Result isendNarrow(void* sendComm, void* data, int size, int tag, void* mhandle,
                   void** request) noexcept;  // v6 to v8
Result irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
             void** request) noexcept;
Result irecvNarrow(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                   void** request) noexcept;  // v6 to v8
// v10+: the profiler handles are accepted and unused (we emit no profiler events).
Result isendProfiled(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* pHandle,
                     void** request) noexcept;
Result irecvProfiled(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** pHandles, void** request) noexcept;
Result iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
              void** request) noexcept;
Result test(void* request, int* done, int* sizes) noexcept;

Result closeSend(void* sendComm) noexcept;
Result closeRecv(void* recvComm) noexcept;
Result closeListen(void* listenComm) noexcept;

// Device offload (v7+): not offered, so there is no device handle and nothing to consume.
Result getDeviceMr(void* comm, void* mhandle, void** dptrMhandle) noexcept;
Result irecvConsumed(void* recvComm, int n, void* request) noexcept;

// v10: the traffic class of a connect's comm config is noted, not yet applied.
void noteTrafficClass(const CommConfig* config, const char* entry) noexcept;

// v11+: one context per NCCL communicator, from init to finalize. listen and connect check it.
Result initContext(void** ctx, uint64_t commId, CommConfig* config, Logger logger,
                   ProfilerCallback profiler) noexcept;
Result finalize(void* ctx) noexcept;
Result setNetAttr(void* ctx, NetAttr* attr) noexcept;
Result checkContext(void* ctx, const char* entry) noexcept;
Result listenInContext(void* ctx, int dev, void* handle, void** listenComm) noexcept;
Result connectInContext(void* ctx, int dev, void* handle, void** sendComm,
                        NetDeviceHandle** devComm) noexcept;

}  // namespace nnf::abi::entry
