// Drives any exported ABI version (v6 to v12) through one v8-shaped table, the way NCCL wraps an
// older plugin in its newest interface: the tools and the functional tests are written once
// against v8 and run through whichever version was loaded.
#pragma once

#include "nccl_net/net.h"

namespace nnf::tools {

constexpr int kOldestAbi = 6;
constexpr int kNewestAbi = 12;

// `table` is the ncclNetPlugin_v<version> symbol. v8 is returned as it is; any other version
// gets a process-wide adapter (one per version), so a process drives one table per version.
// v11+: init makes the per-communicator context (commId 0, no traffic class) that listen and
// connect then pass on; finalizeAdapted() ends it.
const abi::NetV8* adaptToV8(const void* table, int version);
abi::Result finalizeAdapted(int version);

}  // namespace nnf::tools
