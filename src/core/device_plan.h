// Turns the provider's NICs into NCCL devices: NICs grouped by the GPU they sit closest to
// (hwloc), each group one device whose NICs are its rails.
#pragma once

#include <vector>

#include "config/config.h"
#include "core/device.h"
#include "fabric/provider.h"

namespace nnf::core {

// One spec per device, in NCCL device order. Throws config::ConfigError for a malformed
// NCCL_FABRIC_RAILS. When a device drives several NICs next to a GPU, also writes an NCCL
// topology file and points NCCL_TOPO_FILE at it (unless the user set one).
std::vector<DeviceSpec> planDevices(const fabric::ProviderChoice& choice,
                                    const config::Config& config);

}  // namespace nnf::core
