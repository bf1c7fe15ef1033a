// The facts of a machine an `lstopo --of xml` dump describes, as its efa provider would report
// them: one fi_info per EFA NIC of the dump, and the dump as the hwloc topology. The plugin's
// own decisions (core::planNetwork) then run on them: fabric-net-info --topology.
#pragma once

#include <string>
#include <vector>

#include "core/network_plan.h"
#include "info_list.h"
#include "topology/hwloc_topology.h"
#include "topology/pci_address.h"

namespace nnf::tools {

// The name udev gives the RDMA device at `address` ("rdmap79s0" at 0000:4f:00.0), which is what
// efa names the NIC (its domain is that name and "-rdm").
std::string udevRdmaName(const topology::PciAddress& address);

// The dump's EFA NICs in PCI order, as efa lists them: domain "<device>-rdm", the device named
// after its OpenFabrics OS device (else as udev would), the line rate of its generation
// (topology::efaSpeedMbps), RMA writes with 4 bytes of immediate data, FI_HMEM.
std::vector<InfoEntry> efaEntriesOf(const topology::Topology& topo);

// Those NICs as the provider list, the dump as the topology; writes done by the device (the
// probe is the live machine's to answer) and CUDA usable, as on the GPU instances the dumps
// come from. Throws topology::TopologyError when the dump cannot be loaded.
core::PlanSources dumpSources(const std::string& xmlPath);

}  // namespace nnf::tools
