// ncclNetPlugin_v12 (NCCL 2.30): rail and plane ids, eight devices per virtual NIC.
// Written from NCCL's plugin headers; layouts are pinned with static_asserts so that a mistake
// fails the build instead of corrupting NCCL's memory.
#pragma once

#include "nccl_net/net_v11.h"

namespace nnf::abi {

using VDevicePropsV12 = VDeviceProps<kMaxDevsPerNicV12>;

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

using NetV12 = NetV11Layout<PropertiesV12, VDevicePropsV12>;

static_assert(sizeof(VDevicePropsV12) == 36);
static_assert(offsetof(PropertiesV12, maxP2pBytes) == 104);
static_assert(offsetof(PropertiesV12, maxCollBytes) == 112);
static_assert(offsetof(PropertiesV12, maxMultiRequestSize) == 120);
static_assert(offsetof(PropertiesV12, railId) == 124);
static_assert(offsetof(PropertiesV12, planeId) == 126);
static_assert(sizeof(PropertiesV12) == 128);
static_assert(sizeof(NetV12) == 22 * kPtr);

}  // namespace nnf::abi
