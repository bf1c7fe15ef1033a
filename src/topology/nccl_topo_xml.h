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

// True when some device with GPUs carries data on more than one NIC: only then would NCCL,
// sizing the device by its leader's PCIe link, see less than the device moves.
bool needsNcclTopoFile(const Plan& plan, size_t carryingRails);

// <system version="1"><cpu numaid=..><pci busid=switch><pci busid=gpu/><pci busid=leader
// link_speed link_width><nic><net name dev speed port guid gdr/></nic></pci></pci></cpu>
// </system>, covering the devices that have GPUs and a leader hwloc knows. `gdr` is the
// GPUDirect flag written for every net (it must match ptrSupport: NCCL keeps the file's value);
// speeds count the first `carryingRails` NICs of each device.
std::string ncclTopoXml(const Plan& plan, const std::vector<Nic>& nics, const Topology& topo,
                        bool gdr, size_t carryingRails);

// Writes the XML to `path` (replacing it). Throws TopologyError on I/O failure.
void writeNcclTopoFile(const std::string& path, const Plan& plan, const std::vector<Nic>& nics,
                       const Topology& topo, bool gdr, size_t carryingRails);

// When the plan needs a file and NCCL_TOPO_FILE is unset, writes the XML into an anonymous
// in-memory file (memfd), sets NCCL_TOPO_FILE to its /proc/self/fd path and returns that path.
// Nothing is left on disk: the file goes with the process, however it ends. A /proc/self/fd
// value that no longer opens (inherited by a child that closed the descriptor) counts as unset.
// Returns "" when nothing was needed, the user's variable was kept, or writing failed (WARN).
std::string exportNcclTopoFile(const Plan& plan, const std::vector<Nic>& nics, const Topology& topo,
                               bool gdr, size_t carryingRails);

}  // namespace nnf::topology
