// ncclNetPlugin_v9: forceFlush, virtual devices, size_t message sizes, maxP2pBytes/maxCollBytes.
// Written from NCCL's plugin headers; layouts are pinned with static_asserts so that a mistake
// fails the build instead of corrupting NCCL's memory.
#pragma once

#include "nccl_net/common.h"

namespace nnf::abi {

template <int MaxDevs>
struct VDeviceProps {
  int ndevs;
  int devs[MaxDevs];
};
using VDevicePropsV9 = VDeviceProps<kMaxDevsPerNicV9>;  // also v10 and v11

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

static_assert(sizeof(VDevicePropsV9) == 20);
static_assert(offsetof(PropertiesV9, forceFlush) == 32);
static_assert(offsetof(PropertiesV9, speed) == 36);
static_assert(offsetof(PropertiesV9, netDeviceVersion) == 60);
static_assert(offsetof(PropertiesV9, vProps) == 64);
static_assert(offsetof(PropertiesV9, maxP2pBytes) == 88);
static_assert(offsetof(PropertiesV9, maxCollBytes) == 96);
static_assert(sizeof(PropertiesV9) == 104);
static_assert(sizeof(NetV9) == 20 * kPtr);
static_assert(offsetof(NetV9, makeVDevice) == 19 * kPtr);

}  // namespace nnf::abi
