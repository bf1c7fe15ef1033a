// What every ABI shim shares: the noexcept firewall, and one conversion from the core's device
// properties into any version's property struct (each field set on purpose, by version).
#pragma once

#include <algorithm>
#include <climits>
#include <exception>

#include "nccl_net/net.h"
#include "core/device.h"
#include "core/plugin.h"
#include "log/log.h"

namespace nnf::abi {

// Runs one entry point's body; nothing thrown gets past it into NCCL.
template <typename Body>
Result guarded(const char* entry, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& error) {
    NNF_WARN("%s: unexpected error: %s", entry, error.what());
  } catch (...) {
    NNF_WARN("%s: unexpected error", entry);
  }
  return kInternalError;
}

// The largest message NCCL may hand one isend/irecv (v9+ maxP2pBytes and maxCollBytes): the
// provider's limit, capped at the 1 TiB NCCL accepts.
inline size_t messageLimit(const core::DeviceProperties& core) {
  return std::min(core.maxMessageBytes, kMaxNetSizeBytes);
}

// test() reports sizes as int in every version: a larger message saturates rather than wraps.
inline int reportedSize(size_t size) {
  return static_cast<int>(std::min<size_t>(size, INT_MAX));
}

template <int Version, typename Props>
void convertProperties(int dev, const core::DeviceProperties& core, Props* props) {
  *props = Props{};
  props->name = const_cast<char*>(core.name.c_str());
  props->pciPath = core.pciPath.empty() ? nullptr : const_cast<char*>(core.pciPath.c_str());
  props->guid = core.guid;
  props->ptrSupport = core.ptrSupport;
  props->speed = core.speedMbps;
  props->port = core.port;
  props->latency = core.latencyUs;
  props->maxComms = core.maxComms;
  props->maxRecvs = core.maxRecvs;
  if constexpr (Version >= 7) {
    // Host-side networking only: no device offload, so no offload version either.
    props->netDeviceType = kNetDeviceHost;
    props->netDeviceVersion = 0;
  }
  if constexpr (Version >= 8) props->regIsGlobal = core.regIsGlobal;
  if constexpr (Version >= 9) {
    // NCCL's own GPUDirect logic decides when to flush; we never need it forced.
    props->forceFlush = 0;
    // Every device is physical: our plan already groups a GPU's NICs into one device (the
    // multi-rail machinery), so makeVDevice stays NULL and NCCL merges nothing further.
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = messageLimit(core);
    props->maxCollBytes = messageLimit(core);
  }
  if constexpr (Version >= 11) props->maxMultiRequestSize = 1;  // no multi-requests
  if constexpr (Version >= 12) {
    // Devices are planned one per GPU in GPU order, so device i is rail i on every host. Planes
    // (separate fabrics) are unknown to libfabric: left undefined, NCCL then ignores them.
    props->railId = static_cast<int16_t>(std::min(dev, static_cast<int>(INT16_MAX)));
    props->planeId = kNetIdUndef;
  }
}

template <int Version, typename Props>
Result getProperties(int dev, Props* props) noexcept {
  return guarded("getProperties", [&] {
    const core::DeviceProperties* core = nullptr;
    Result result = core::Plugin::instance().properties(dev, &core);
    if (result != kSuccess) return result;
    if (props == nullptr) {
      NNF_WARN("getProperties: NULL properties pointer");
      return kInternalError;
    }
    convertProperties<Version>(dev, *core, props);
    return kSuccess;
  });
}

}  // namespace nnf::abi
