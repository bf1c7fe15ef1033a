// The vocabulary of NCCL's plugin ABI that every layer of the plugin speaks: result codes, log
// levels and the logger, pointer kinds and the limits NCCL fixes. Dependency-free; the one file
// of include/ that src/ outside the ABI shims may include (tests/unit/layers_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nnf::abi {

// ncclResult_t: NCCL passes and expects a plain C enum (int sized).
enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

enum LogLevel : int {
  kLogNone = 0,
  kLogVersion = 1,
  kLogWarn = 2,
  kLogInfo = 3,
  kLogAbort = 4,
  kLogTrace = 5,
};

// Subsystem flags passed to the logger.
constexpr unsigned long kLogSubsysInit = 1;
constexpr unsigned long kLogSubsysNet = 16;
constexpr unsigned long kLogSubsysEnv = 128;

using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line,
                        const char* fmt, ...);
// v10+: NCCL's profiler hook for network events (accepted, never called: we emit no events).
using ProfilerCallback = Result (*)(void** eventHandle, int type, void* pHandle, int64_t pluginId,
                                    void* extData);

constexpr int kHandleMaxSize = 128;
constexpr int kPtrHost = 1;
constexpr int kPtrCuda = 2;
constexpr int kPtrDmaBuf = 4;
constexpr int kMaxRequests = 32;        // NCCL_NET_MAX_REQUESTS
constexpr int kTrafficClassUndef = -1;  // NCCL_NET_TRAFFIC_CLASS_UNDEF
constexpr int16_t kNetIdUndef = -1;     // NCCL_NET_ID_UNDEF (v12 rail and plane ids)
constexpr int kMaxDevsPerNicV9 = 4;     // virtual-device fan-in, v9 to v11
constexpr int kMaxDevsPerNicV12 = 8;
// NCCL refuses maxP2pBytes/maxCollBytes above 1 TiB (NCCL_MAX_NET_SIZE_BYTES).
constexpr size_t kMaxNetSizeBytes = size_t{1} << 40;

static_assert(sizeof(Result) == 4);

}  // namespace nnf::abi
