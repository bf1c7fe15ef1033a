// Our own declarations of the NCCL net plugin ABI: the parts every version shares, and the
// tables and property structs of v6 to v12. Written from NCCL's plugin headers; layouts are
// pinned with static_asserts so that a mistake fails the build instead of corrupting NCCL's memory.
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

enum NetDeviceType : int { kNetDeviceHost = 0, kNetDeviceUnpack = 1 };

// v7+: what connect/accept may hand back for device-side networking (we never do: NULL).
struct NetDeviceHandleV8 {
  NetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
};
using NetDeviceHandle = NetDeviceHandleV8;  // unchanged from v7 to v12

// ---- v6 (NCCL 2.12 to 2.18; older PyTorch containers) ----
struct PropertiesV6 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;  // Mbps
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
};

struct NetV6 {
  const char* name;
  Result (*init)(Logger logFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, PropertiesV6* props);
  Result (*listen)(int dev, void* handle, void** listenComm);
  Result (*connect)(int dev, void* handle, void** sendComm);
  Result (*accept)(void* listenComm, void** recvComm);
  Result (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
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
};

// ---- v7: device offload fields and entry points ----
struct PropertiesV7 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  NetDeviceType netDeviceType;
  int netDeviceVersion;
};

struct NetV7 {
  const char* name;
  Result (*init)(Logger logFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, PropertiesV7* props);
  Result (*listen)(int dev, void* handle, void** listenComm);
  Result (*connect)(int dev, void* handle, void** sendComm, NetDeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, NetDeviceHandle** recvDevComm);
  Result (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
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

// ---- v8: regIsGlobal, size_t regMr ----
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
  Result (*connect)(int dev, void* handle, void** sendComm, NetDeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, NetDeviceHandle** recvDevComm);
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

// ---- v9: forceFlush, virtual devices, size_t message sizes, maxP2pBytes/maxCollBytes ----
template <int MaxDevs>
struct VDeviceProps {
  int ndevs;
  int devs[MaxDevs];
};
using VDevicePropsV9 = VDeviceProps<kMaxDevsPerNicV9>;  // also v10 and v11
using VDevicePropsV12 = VDeviceProps<kMaxDevsPerNicV12>;

// v9 to v12 grow by appending fields (and v12 widens vProps).
struct PropertiesV9 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  NetDeviceType netDeviceType;
  int netDeviceVersion;
  VDevicePropsV9 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
};
using PropertiesV10 = PropertiesV9;  // identical layout

struct PropertiesV11 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  NetDeviceType netDeviceType;
  int netDeviceVersion;
  VDevicePropsV9 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
};

struct PropertiesV12 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  NetDeviceType netDeviceType;
  int netDeviceVersion;
  VDevicePropsV12 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
};

struct NetV9 {
  const char* name;
  Result (*init)(Logger logFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, PropertiesV9* props);
  Result (*listen)(int dev, void* handle, void** listenComm);
  Result (*connect)(int dev, void* handle, void** sendComm, NetDeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, NetDeviceHandle** recvDevComm);
  Result (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                        void** mhandle);
  Result (*deregMr)(void* comm, void* mhandle);
  Result (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  Result (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                  void** request);
  Result (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*closeSend)(void* sendComm);
  Result (*closeRecv)(void* recvComm);
  Result (*closeListen)(void* listenComm);
  Result (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecvConsumed)(void* recvComm, int n, void* request);
  Result (*makeVDevice)(int* d, VDevicePropsV9* props);
};

// ---- v10: comm config (traffic class) on connect, profiler callback and handles ----
struct CommConfig {  // v10 to v12, binary identical
  int trafficClass;
};

struct NetV10 {
  const char* name;
  Result (*init)(Logger logFunction, ProfilerCallback profFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, PropertiesV10* props);
  Result (*listen)(int dev, void* handle, void** listenComm);
  Result (*connect)(int dev, CommConfig* config, void* handle, void** sendComm,
                    NetDeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, NetDeviceHandle** recvDevComm);
  Result (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                        void** mhandle);
  Result (*deregMr)(void* comm, void* mhandle);
  Result (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* pHandle,
                  void** request);
  Result (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                  void** pHandles, void** request);
  Result (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*closeSend)(void* sendComm);
  Result (*closeRecv)(void* recvComm);
  Result (*closeListen)(void* listenComm);
  Result (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecvConsumed)(void* recvComm, int n, void* request);
  Result (*makeVDevice)(int* d, VDevicePropsV9* props);
};

// ---- v11: a context per NCCL communicator, finalize, setNetAttr ----
struct CommAttr {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
};
struct NetAttr {  // v11 and v12, binary identical
  CommAttr sendCommAttr;
  CommAttr recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
};

// v11 and v12 share every entry point; only the property struct differs.
template <typename Props, typename VProps>
struct NetV11Layout {
  const char* name;
  Result (*init)(void** ctx, uint64_t commId, CommConfig* config, Logger logFunction,
                 ProfilerCallback profFunction);
  Result (*devices)(int* ndev);
  Result (*getProperties)(int dev, Props* props);
  Result (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  Result (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                    NetDeviceHandle** sendDevComm);
  Result (*accept)(void* listenComm, void** recvComm, NetDeviceHandle** recvDevComm);
  Result (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                        void** mhandle);
  Result (*deregMr)(void* comm, void* mhandle);
  Result (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* pHandle,
                  void** request);
  Result (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                  void** pHandles, void** request);
  Result (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*closeSend)(void* sendComm);
  Result (*closeRecv)(void* recvComm);
  Result (*closeListen)(void* listenComm);
  Result (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecvConsumed)(void* recvComm, int n, void* request);
  Result (*makeVDevice)(int* d, VProps* props);
  Result (*finalize)(void* ctx);
  Result (*setNetAttr)(void* ctx, NetAttr* netAttr);
};
using NetV11 = NetV11Layout<PropertiesV11, VDevicePropsV9>;
// ---- v12 (NCCL 2.30): rail and plane ids, eight devices per virtual NIC ----
using NetV12 = NetV11Layout<PropertiesV12, VDevicePropsV12>;

// Layout pins for the LP64 ABI NCCL is built for (offsets as NCCL's own headers give them).
constexpr size_t kPtr = sizeof(void*);
static_assert(sizeof(Result) == 4);
static_assert(sizeof(NetDeviceType) == 4);
static_assert(sizeof(NetDeviceHandleV8) == 32);
static_assert(offsetof(NetDeviceHandleV8, handle) == 8);
static_assert(offsetof(NetDeviceHandleV8, size) == 16);
static_assert(offsetof(NetDeviceHandleV8, needsProxyProgress) == 24);

static_assert(sizeof(PropertiesV6) == 48);
static_assert(offsetof(PropertiesV6, guid) == 16);
static_assert(offsetof(PropertiesV6, ptrSupport) == 24);
static_assert(offsetof(PropertiesV6, speed) == 28);
static_assert(offsetof(PropertiesV6, latency) == 36);
static_assert(offsetof(PropertiesV6, maxRecvs) == 44);
static_assert(sizeof(PropertiesV7) == 56);
static_assert(offsetof(PropertiesV7, maxRecvs) == 44);
static_assert(offsetof(PropertiesV7, netDeviceType) == 48);
static_assert(offsetof(PropertiesV7, netDeviceVersion) == 52);
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
static_assert(sizeof(VDevicePropsV9) == 20);
static_assert(sizeof(VDevicePropsV12) == 36);
static_assert(offsetof(PropertiesV9, forceFlush) == 32);
static_assert(offsetof(PropertiesV9, speed) == 36);
static_assert(offsetof(PropertiesV9, netDeviceVersion) == 60);
static_assert(offsetof(PropertiesV9, vProps) == 64);
static_assert(offsetof(PropertiesV9, maxP2pBytes) == 88);
static_assert(offsetof(PropertiesV9, maxCollBytes) == 96);
static_assert(sizeof(PropertiesV9) == 104);
static_assert(offsetof(PropertiesV11, maxMultiRequestSize) == 104);
static_assert(sizeof(PropertiesV11) == 112);
static_assert(offsetof(PropertiesV12, maxP2pBytes) == 104);
static_assert(offsetof(PropertiesV12, maxCollBytes) == 112);
static_assert(offsetof(PropertiesV12, maxMultiRequestSize) == 120);
static_assert(offsetof(PropertiesV12, railId) == 124);
static_assert(offsetof(PropertiesV12, planeId) == 126);
static_assert(sizeof(PropertiesV12) == 128);
static_assert(sizeof(CommConfig) == 4);
static_assert(sizeof(NetAttr) == 44);
static_assert(offsetof(NetAttr, recvCommAttr) == 16);
static_assert(offsetof(NetAttr, proto) == 40);

static_assert(sizeof(NetV6) == 17 * kPtr);
static_assert(offsetof(NetV6, regMr) == 7 * kPtr);
static_assert(offsetof(NetV6, closeListen) == 16 * kPtr);
static_assert(sizeof(NetV7) == 19 * kPtr);
static_assert(offsetof(NetV7, irecvConsumed) == 18 * kPtr);
static_assert(sizeof(NetV8) == 19 * kPtr);
static_assert(offsetof(NetV8, init) == 8);
static_assert(offsetof(NetV8, isend) == 10 * kPtr);
static_assert(offsetof(NetV8, test) == 13 * kPtr);
static_assert(offsetof(NetV8, irecvConsumed) == 18 * kPtr);
static_assert(sizeof(NetV9) == 20 * kPtr);
static_assert(offsetof(NetV9, makeVDevice) == 19 * kPtr);
static_assert(sizeof(NetV10) == 20 * kPtr);
static_assert(offsetof(NetV10, connect) == 5 * kPtr);
static_assert(offsetof(NetV10, makeVDevice) == 19 * kPtr);
static_assert(sizeof(NetV11) == 22 * kPtr);
static_assert(offsetof(NetV11, listen) == 4 * kPtr);
static_assert(offsetof(NetV11, finalize) == 20 * kPtr);
static_assert(offsetof(NetV11, setNetAttr) == 21 * kPtr);
static_assert(sizeof(NetV12) == 22 * kPtr);

}  // namespace nnf::abi
