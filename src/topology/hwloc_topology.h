// RAII ownership of an hwloc topology loaded with every I/O object kept (bridges, PCI devices,
// OS devices): the planner needs the PCI tree, which hwloc drops by default.
#pragma once

#include <hwloc.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "topology/pci_address.h"

namespace nnf::topology {

class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Topology {
 public:
  // The running machine (hwloc honours HWLOC_XMLFILE / HWLOC_FSROOT as usual).
  static Topology fromSystem();
  // An `lstopo --of xml` dump. Throws TopologyError naming the file when it cannot be loaded.
  static Topology fromXmlFile(const std::string& path);

  Topology(Topology&& other) noexcept : topo_(other.topo_) { other.topo_ = nullptr; }
  Topology& operator=(Topology&& other) noexcept;
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  ~Topology();

  hwloc_topology_t get() const { return topo_; }

  // The PCI device object at `addr`, nullptr when the topology has none.
  hwloc_obj_t pciObject(const PciAddress& addr) const;
  // NVIDIA GPUs (vendor 0x10de, class 3D 0x0302 or VGA 0x0300), in PCI order.
  std::vector<hwloc_obj_t> gpus() const;

 private:
  explicit Topology(hwloc_topology_t topo) : topo_(topo) {}
  hwloc_topology_t topo_ = nullptr;
};

// Helpers on hwloc objects, shared by the planner and the writers.
PciAddress pciAddressOf(hwloc_obj_t pcidev);
bool isNvidiaGpu(hwloc_obj_t obj);
// Number of parents between `obj` and the root (hwloc's own depth is a negative constant for
// I/O objects, so it cannot order them).
int treeDepth(hwloc_obj_t obj);
// Deepest object that is an ancestor of (or equal to) both.
hwloc_obj_t commonAncestor(hwloc_obj_t a, hwloc_obj_t b);
// The first non-I/O ancestor's NUMA node when it covers exactly one, else -1.
int numaNodeOf(hwloc_topology_t topo, hwloc_obj_t obj);
// hwloc list syntax ("0-47,96-143") of the CPUs local to `obj`; "" when unknown.
std::string cpusetOf(hwloc_topology_t topo, hwloc_obj_t obj);

}  // namespace nnf::topology
