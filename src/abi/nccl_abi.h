// Our own declarations of the NCCL net plugin ABI (version-neutral parts and v8).
// Written from NCCL's plugin documentation; layouts are pinned with static_asserts so that a
// mistake fails the build instead of corrupting NCCL's memory.
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

constexpr int kHandleMaxSize = 128;
constexpr int kPtrHost = 1;
constexpr int kPtrCuda = 2;
constexpr int kPtrDmaBuf = 4;
constexpr int kMaxRequests = 32;  // NCCL_NET_MAX_REQUESTS

enum NetDeviceType : int { kNetDeviceHost = 0, kNetDeviceUnpack = 1 };

struct NetDeviceHandleV8 {
  NetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
};

struct PropertiesV8 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;  // Mbps
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  NetDeviceType netDeviceType;
  int netDeviceVersion;
};

struct NetV8 {
  const char* name;
  Result (*init)(Logger logFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, PropertiesV8* props);
  Result (*listen)(int dev, void* handle, void** listenComm);
  Result (*connect)(int dev, void* handle, void** sendComm, NetDeviceHandleV8** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, NetDeviceHandleV8** recvDevComm);
  Result (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                        void** mhandle);
  Result (*deregMr)(void* comm, void* mhandle);
  Result (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  Result (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                  void** request);
  Result (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*closeSend)(void* sendComm);
  Result (*closeRecv)(void* recvComm);
  Result (*closeListen)(void* listenComm);
  Result (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecvConsumed)(void* recvComm, int n, void* request);
};

// Layout pins for the LP64 ABI NCCL is built for.
static_assert(sizeof(Result) == 4);
static_assert(sizeof(NetDeviceHandleV8) == 32);
static_assert(offsetof(NetDeviceHandleV8, handle) == 8);
static_assert(offsetof(NetDeviceHandleV8, size) == 16);
static_assert(offsetof(NetDeviceHandleV8, needsProxyProgress) == 24);
static_assert(sizeof(PropertiesV8) == 64);
static_assert(offsetof(PropertiesV8, pciPath) == 8);
static_assert(offsetof(PropertiesV8, guid) == 16);
static_assert(offsetof(PropertiesV8, ptrSupport) == 24);
static_assert(offsetof(PropertiesV8, regIsGlobal) == 28);
static_assert(offsetof(PropertiesV8, speed) == 32);
static_assert(offsetof(PropertiesV8, port) == 36);
static_assert(offsetof(PropertiesV8, latency) == 40);
static_assert(offsetof(PropertiesV8, maxComms) == 44);
static_assert(offsetof(PropertiesV8, maxRecvs) == 48);
static_assert(offsetof(PropertiesV8, netDeviceType) == 52);
static_assert(offsetof(PropertiesV8, netDeviceVersion) == 56);
static_assert(sizeof(NetV8) == 19 * sizeof(void*));
static_assert(offsetof(NetV8, init) == 8);
static_assert(offsetof(NetV8, isend) == 10 * sizeof(void*));
static_assert(offsetof(NetV8, test) == 13 * sizeof(void*));
static_assert(offsetof(NetV8, irecvConsumed) == 18 * sizeof(void*));

}  // namespace nnf::abi
