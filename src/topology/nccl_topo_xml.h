// NCCL topology XML for plans where a device drives several NICs. NCCL sizes a net device by
// the PCIe link of the NIC it finds at pciPath; a device of 4 x 100 Gb/s rails would be capped
// at one NIC's link and placed as if it were one NIC. The file places each device's leader NIC
// beside its GPUs with a link wide enough for the summed speed. NCCL completes every attribute
// the file leaves out from sysfs.
#pragma once

#include <string>
#include <vector>

#include "topology/hwloc_topology.h"
#include "topology/planner.h"

namespace nnf::topology {

// True when some device with GPUs has more than one NIC.
bool needsNcclTopoFile(const Plan& plan);

// <system version="1"><cpu numaid=..><pci busid=switch><pci busid=gpu/><pci busid=leader
// link_speed link_width><nic><net name dev speed port guid gdr/></nic></pci></pci></cpu>
// </system>, covering the devices that have GPUs and a leader hwloc knows. `gdr` is the
// GPUDirect flag written for every net.
std::string ncclTopoXml(const Plan& plan, const std::vector<Nic>& nics, const Topology& topo,
                        bool gdr);

// Writes the XML to `path` (replacing it). Throws TopologyError on I/O failure.
void writeNcclTopoFile(const std::string& path, const Plan& plan, const std::vector<Nic>& nics,
                       const Topology& topo, bool gdr);

// When the plan needs a file and NCCL_TOPO_FILE is unset, writes
// <dir>/nccl-net-fabric-topo-<pid>.xml, sets NCCL_TOPO_FILE to it and returns the path.
// Returns "" when nothing was needed, the user's variable was kept, or writing failed (WARN).
std::string exportNcclTopoFile(const Plan& plan, const std::vector<Nic>& nics, const Topology& topo,
                               bool gdr, const std::string& dir = "/tmp");

}  // namespace nnf::topology
