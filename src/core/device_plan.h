// Turns the provider's NICs into NCCL devices: NICs grouped by the GPU they sit closest to
// (hwloc), each group one device whose NICs are its rails.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "config/config.h"
#include "core/device.h"
#include "fabric/provider.h"
#include "topology/hwloc_topology.h"
#include "topology/planner.h"

namespace nnf::core {

struct DevicePlan {
  std::vector<DeviceSpec> specs;  // one per device, in NCCL device order
  topology::Plan plan;
  std::vector<topology::Nic> nics;
  std::optional<topology::Topology> topo;  // only where some NIC has PCI data
};

// Groups the NICs into devices. The first `carryingRails` NICs of a device carry its data (what
// the protocol drives: DeviceSpec::carryingRails) and its speed counts those. `loadTopology`
// gives the machine's hwloc topology (Topology::fromSystem, a dump offline), asked only when some
// NIC has PCI data; when it throws, every NIC is a device of its own. Throws config::ConfigError
// for a malformed NCCL_FABRIC_RAILS.
DevicePlan planDevices(const fabric::ProviderChoice& choice, const config::Config& config,
                       size_t carryingRails,
                       const std::function<topology::Topology()>& loadTopology);

// Once the devices are open and ptrSupport is final: where a device carries data on several
// NICs next to a GPU, gives NCCL a topology file (unless the user set one) whose gdr flag is
// `gdr`.
void exportTopology(const DevicePlan& plan, bool gdr, size_t carryingRails);

}  // namespace nnf::core
