// ncclNetPlugin_v7: device offload fields and entry points.
// Written from NCCL's plugin headers; layouts are pinned with static_asserts so that a mistake
// fails the build instead of corrupting NCCL's memory.
#pragma once

#include "nccl_net/common.h"

namespace nnf::abi {

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

static_assert(sizeof(PropertiesV7) == 56);
static_assert(offsetof(PropertiesV7, maxRecvs) == 44);
static_assert(offsetof(PropertiesV7, netDeviceType) == 48);
static_assert(offsetof(PropertiesV7, netDeviceVersion) == 52);
static_assert(sizeof(NetV7) == 19 * kPtr);
static_assert(offsetof(NetV7, irecvConsumed) == 18 * kPtr);

}  // namespace nnf::abi
