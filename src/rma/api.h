// The one-sided RMA plugin's entry points, once for all ABI versions (src/abi/rma_v13.cc to
// rma_v15.cc convert their arguments and land here). Arguments are validated here: a bad handle,
// offset, size, rank or alignment is one WARN and ncclInvalidUsage or ncclInternalError.
//
// It runs on the net plugin's devices (core::Plugin), their rails, registration cache and
// endpoints; init() initialises the plugin if NCCL's net plugin has not yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "nccl_net/types.h"

namespace nnf::core {
class Device;
struct DeviceProperties;
}  // namespace nnf::core

namespace nnf::rma {

class Engine;

// iputSignal's signal as NCCL passes it.
struct SignalSpec {
  uint64_t offset = 0;
  void* window = nullptr;
  uint64_t value = 0;
  uint32_t op = 0;
  bool strong = true;
};

class Api {
 public:
  static Api& instance();

  abi::Result init(void** ctx, uint64_t commId, abi::Logger logger);
  abi::Result finalize(void* ctx);
  // Devices that can carry RMA: all of the plugin's, or none (0: NCCL does without us).
  abi::Result devices(int* count);
  abi::Result properties(int dev, const core::DeviceProperties** out);

  // `ctx` is not looked at: NCCL 2.30 passes its RMA context to listen and its net context to
  // connect.
  abi::Result listen(void* ctx, int dev, void* handle, void** listenComm);
  abi::Result connect(void* ctx, void* const* handles, int nranks, int rank, void* listenComm,
                      void** collComm);
  abi::Result closeListen(void* listenComm);
  abi::Result closeColl(void* collComm);

  abi::Result createContext(void* collComm, int streams, void** rmaCtx);
  abi::Result destroyContext(void* rmaCtx);
  abi::Result regMrSym(void* collComm, void* data, size_t size, int type, uint64_t dmabufOffset,
                       int fd, uint64_t flags, void** mhandle);
  abi::Result deregMrSym(void* collComm, void* mhandle);

  // `signal` null: iput.
  abi::Result put(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                  uint64_t dstOff, void* dstMhandle, uint32_t rank, const SignalSpec* signal,
                  void** request);
  abi::Result get(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
                  uint64_t localOff, void* localMhandle, uint32_t rank, void** request);
  abi::Result flush(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request);
  abi::Result test(void* collComm, void* request, int* done);
  abi::Result progress(void* rmaCtx);
  abi::Result queryLastError(void* rmaCtx, bool* hasError);

 private:
  Api() = default;
  // The device `dev` if it carries RMA (else one WARN naming `entry`).
  core::Device* rmaDevice(int dev, const char* entry);
  // The device's engine, made (and installed as its sink) on first use; device lock held.
  Engine& engineFor(core::Device& device);

  std::mutex mutex_;
  std::vector<std::unique_ptr<Engine>> engines_;  // by device index
  struct Instance;
  std::unordered_set<Instance*> instances_;
  // The groups NCCL holds (their collComm handles): closeColl checks here before it reads the
  // handle, so that a second close is refused instead of reading the freed group.
  std::unordered_set<const void*> openGroups_;
  bool reportedNoRma_ = false;
};

}  // namespace nnf::rma
