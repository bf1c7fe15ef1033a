// EFA devices in a topology: Amazon's vendor id 0x1d0f with device ids 0xefa0-0xefaf (one per
// generation). 0x1d0f:0xec20 is ENA, plain Ethernet, and is not EFA.
#pragma once

#include <cstdint>
#include <vector>

#include "topology/hwloc_topology.h"
#include "topology/planner.h"

namespace nnf::topology {

bool isEfaDevice(unsigned vendorId, unsigned deviceId);

// Line rate by generation, for offline plans where libfabric cannot be asked: efa0/efa1
// 100 Gb/s (p4d, p5, g6, c5n), efa2 200 Gb/s (p5en), efa3 and later 400 Gb/s (p6).
int64_t efaSpeedMbps(unsigned deviceId);

// The EFA NICs of a dump in PCI order, named after their OpenFabrics OS device ("rdmap79s0")
// or, lacking one, their PCI address.
std::vector<Nic> listEfaNics(const Topology& topo);

}  // namespace nnf::topology
