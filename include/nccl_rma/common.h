// What NCCL's one-sided RMA plugin ABI (v13 to v15) adds to the net vocabulary: signal
// operations, registration flags, the GIN proxy device type and the option flags of v15.
// Written from NCCL's plugin headers (src/include/plugin/nccl_net.h, nccl_device/net_device.h)
// and aws-ofi-nccl's vendored rma_v15.h; layouts are pinned with static_asserts in each version's
// header so that a mistake fails the build instead of corrupting NCCL's memory.
#pragma once

#include <cstdint>

#include "nccl_net/common.h"
#include "nccl_net/types.h"

namespace nnf::abi {

// NCCL_NET_SIGNAL_OP_INC / _ADD: what iputSignal does to the 64-bit signal word at the target.
constexpr uint32_t kSignalOpInc = 1;  // the word grows by one (the value is not used)
constexpr uint32_t kSignalOpAdd = 2;  // the word grows by the value

// regMrSym flags (NCCL_NET_MR_FLAG_*): NCCL registers its signal buffers with both.
constexpr uint64_t kMrFlagForceStrongOrder = 1u << 0;  // FORCE_SO: strict PCIe ordering
constexpr uint64_t kMrFlagSignalNeverReset = 1u << 1;  // nobody but the plugin writes it

// v15 optFlags (ncclRmaOptFlags): the caller will post more operations right away, so the
// backend may defer its doorbell.
constexpr uint32_t kRmaOptAggregateRequests = 1u << 0;

// NCCL_NET_DEVICE_GIN_PROXY: NCCL 2.30 loads a v13 table only when getProperties says so.
constexpr NetDeviceType kNetDeviceGinProxy = static_cast<NetDeviceType>(2);

}  // namespace nnf::abi
