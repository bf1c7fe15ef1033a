// What NCCL's getProperties needs from a planned device: the leader's /sys PCI path, the summed
// speed of the rails, a stable guid and a name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topology/hwloc_topology.h"
#include "topology/planner.h"

namespace nnf::topology {

// The canonical sysfs path of a PCI function, as NCCL wants it in pciPath
// (e.g. "/sys/devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.0/0000:4f:00.0"):
//  1. realpath of <sysRoot>/bus/pci/devices/<addr> when that exists (the live machine);
//  2. else rebuilt from the hwloc bridges above the device (offline dumps, containers without
//     /sys/bus/pci), when `topo` knows the device;
//  3. else <sysRoot>/bus/pci/devices/<addr> unresolved: its last component is still the bus id,
//     which is what NCCL matches on.
std::string sysfsPciPath(const PciAddress& addr, const Topology* topo,
                         const std::string& sysRoot = "/sys");

// The leader NIC's path; nullopt for a device whose leader has no PCI data (pciPath = NULL).
std::optional<std::string> devicePciPath(const Device& device, const std::vector<Nic>& nics,
                                         const Topology* topo, const std::string& sysRoot = "/sys");

// Speed in Mbps of the rails that carry data: the first `carryingRails` of the device (the
// protocol says how many it drives; the sendrecv protocol drives the leader only).
int64_t deviceSpeedMbps(const Device& device, const std::vector<Nic>& nics, size_t carryingRails);

// The leader's name ("rdmap79s0"); the device's name in NCCL's logs and topology XML.
const std::string& deviceName(const Device& device, const std::vector<Nic>& nics);

// FNV-1a 64 of the leader's PCI address (or name) and the device index: stable across runs on
// one machine, distinct per device (NCCL merges devices that report the same guid).
uint64_t deviceGuid(const Device& device, const std::vector<Nic>& nics, size_t index);

}  // namespace nnf::topology
