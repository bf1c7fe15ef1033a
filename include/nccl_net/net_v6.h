// ncclNetPlugin_v6 (NCCL 2.12 to 2.18; older PyTorch containers).
// Written from NCCL's plugin headers; layouts are pinned with static_asserts so that a mistake
// fails the build instead of corrupting NCCL's memory.
#pragma once

#include "nccl_net/common.h"

namespace nnf::abi {

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

static_assert(sizeof(PropertiesV6) == 48);
static_assert(offsetof(PropertiesV6, guid) == 16);
static_assert(offsetof(PropertiesV6, ptrSupport) == 24);
static_assert(offsetof(PropertiesV6, speed) == 28);
static_assert(offsetof(PropertiesV6, latency) == 36);
static_assert(offsetof(PropertiesV6, maxRecvs) == 44);
static_assert(sizeof(NetV6) == 17 * kPtr);
static_assert(offsetof(NetV6, regMr) == 7 * kPtr);
static_assert(offsetof(NetV6, closeListen) == 16 * kPtr);

}  // namespace nnf::abi
