// ncclNetPlugin_v11: a context per NCCL communicator, finalize, setNetAttr.
// Written from NCCL's plugin headers; layouts are pinned with static_asserts so that a mistake
// fails the build instead of corrupting NCCL's memory.
#pragma once

#include "nccl_net/net_v10.h"

namespace nnf::abi {

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

static_assert(offsetof(PropertiesV11, maxMultiRequestSize) == 104);
static_assert(sizeof(PropertiesV11) == 112);
static_assert(sizeof(NetAttr) == 44);
static_assert(offsetof(NetAttr, recvCommAttr) == 16);
static_assert(offsetof(NetAttr, proto) == 40);
static_assert(sizeof(NetV11) == 22 * kPtr);
static_assert(offsetof(NetV11, listen) == 4 * kPtr);
static_assert(offsetof(NetV11, finalize) == 20 * kPtr);
static_assert(offsetof(NetV11, setNetAttr) == 21 * kPtr);

}  // namespace nnf::abi
