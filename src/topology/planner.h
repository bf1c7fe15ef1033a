// Turns libfabric's NIC list and the machine's hwloc topology into NCCL devices: each device is a
// group of NICs (its rails) serving the GPU(s) they sit closest to on the PCI tree.
//
// Rules (docs/topology.md has the long form):
//  - A NIC is close to a GPU when their deepest common ancestor is a PCI bridge or host bridge;
//    a common ancestor on the CPU side (package, NUMA node, machine) is not close.
//  - NICs sharing the same nearest bridge share its GPUs: n NICs over g GPUs give each GPU n/g
//    NICs in PCI order (the first n%g GPUs one more); with fewer NICs than GPUs each NIC serves a
//    contiguous share of the GPUs and the device lists them all. GPUs that no deeper NIC already
//    serves are preferred.
//  - Devices with GPUs come first, ordered by their first GPU's PCI address; then the manual
//    rail groups (NCCL_FABRIC_RAILS) in the order written; then every other NIC (close to no
//    GPU, without PCI data, or unknown to hwloc) alone, in libfabric order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topology/hwloc_topology.h"
#include "topology/pci_address.h"
#include "topology/rails.h"

namespace nnf::topology {

struct Nic {
  std::string name;               // libfabric's NIC / domain name, e.g. "rdmap79s0" or "eth0"
  std::optional<PciAddress> pci;  // absent for virtual interfaces
  int64_t speedMbps = 0;
};

enum class Placement {
  kGpu,     // NICs grouped around the GPU(s) they are closest to
  kManual,  // a group from NCCL_FABRIC_RAILS
  kNoGpu,   // a PCI NIC whose only common ancestor with every GPU is on the CPU side
  kNoPci,   // a NIC without PCI data, or with an address hwloc does not know
};
const char* placementName(Placement placement);

struct Device {
  Placement placement = Placement::kNoPci;
  std::vector<size_t> nics;      // indices into the input list; the first is the leader
  std::vector<PciAddress> gpus;  // nearest to the leader first, then PCI order
  int numaNode = -1;             // of the leader NIC (or first GPU); -1 when unknown
  std::string cpuset;            // hwloc list syntax, "" when unknown
};

struct Plan {
  std::vector<Device> devices;
};

// `topo` may be nullptr (hwloc unavailable): then every NIC is placed as kNoPci / kManual.
// Never throws for odd machines; NICs unknown to hwloc or named in `rails` but absent are
// reported with NNF_WARN / NNF_INFO.
Plan planDevices(const std::vector<Nic>& nics, const Topology* topo, const RailGroups& rails = {});

}  // namespace nnf::topology
