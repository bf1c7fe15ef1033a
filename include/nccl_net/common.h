// What every net ABI version from v7 shares: the device-side handle.
// Written from NCCL's plugin headers; layouts are pinned with static_asserts so that a mistake
// fails the build instead of corrupting NCCL's memory.
#pragma once

#include <cstddef>

#include "nccl_net/types.h"

namespace nnf::abi {

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

// Layout pins for the LP64 ABI NCCL is built for (offsets as NCCL's own headers give them).
constexpr size_t kPtr = sizeof(void*);
static_assert(sizeof(NetDeviceType) == 4);
static_assert(sizeof(NetDeviceHandleV8) == 32);
static_assert(offsetof(NetDeviceHandleV8, handle) == 8);
static_assert(offsetof(NetDeviceHandleV8, size) == 16);
static_assert(offsetof(NetDeviceHandleV8, needsProxyProgress) == 24);

}  // namespace nnf::abi
