// The RMA plugin's entry points every ABI version shares (v13 to v15), each one noexcept
// firewall into rma::Api. A version whose signature matches points its table here; the others'
// shims convert (v13's GIN-era context and handles, v15's optFlags) and call these.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_rma/rma.h"

namespace nnf::abi::rma_entry {

Result init(void** ctx, uint64_t commId, Logger logger) noexcept;
Result devices(int* ndev) noexcept;
// `proxy`: report the GIN proxy device type (v13 tables are loaded only with it).
Result properties(int dev, PropertiesV12* props, bool proxy) noexcept;
Result listen(void* ctx, int dev, void* handle, void** listenComm) noexcept;
Result connect(void* ctx, void* handles[], int nranks, int rank, void* listenComm,
               void** collComm) noexcept;
Result createContext(void* collComm, int streams, void** rmaCtx) noexcept;
Result regMrSym(void* collComm, void* data, size_t size, int type, uint64_t mrFlags,
                void** mhandle) noexcept;
Result regMrSymDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                      uint64_t mrFlags, void** mhandle) noexcept;
Result deregMrSym(void* collComm, void* mhandle) noexcept;
Result destroyContext(void* rmaCtx) noexcept;
Result closeColl(void* collComm) noexcept;
Result closeListen(void* listenComm) noexcept;
Result iput(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
            uint64_t dstOff, void* dstMhandle, uint32_t rank, void** request) noexcept;
Result iputSignal(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                  uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                  void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                  bool isStrongSignal, void** request) noexcept;
Result iget(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
            uint64_t localOff, void* localMhandle, uint32_t rank, void** request) noexcept;
Result iflush(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request) noexcept;
Result test(void* collComm, void* request, int* done) noexcept;
Result progress(void* rmaCtx) noexcept;
Result queryLastError(void* rmaCtx, bool* hasError) noexcept;
Result finalize(void* ctx) noexcept;

}  // namespace nnf::abi::rma_entry
