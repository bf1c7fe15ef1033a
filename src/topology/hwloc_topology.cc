#include "topology/hwloc_topology.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace nnf::topology {
namespace {

hwloc_topology_t initWithIo() {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) throw TopologyError("hwloc_topology_init failed");
  // Keep every bridge: a switch is only visible as a chain of PCI bridges.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  return topo;
}

}  // namespace

Topology Topology::fromSystem() {
  hwloc_topology_t topo = initWithIo();
  if (hwloc_topology_load(topo) != 0) {
    int err = errno;
    hwloc_topology_destroy(topo);
    throw TopologyError(std::string("hwloc could not load this machine's topology: ") +
                        strerror(err));
  }
  return Topology(topo);
}

Topology Topology::fromXmlFile(const std::string& path) {
  hwloc_topology_t topo = initWithIo();
  if (hwloc_topology_set_xml(topo, path.c_str()) != 0 || hwloc_topology_load(topo) != 0) {
    int err = errno;
    hwloc_topology_destroy(topo);
    throw TopologyError("hwloc could not load the topology file " + path + ": " + strerror(err));
  }
  return Topology(topo);
}

Topology& Topology::operator=(Topology&& other) noexcept {
  if (this != &other) {
    if (topo_ != nullptr) hwloc_topology_destroy(topo_);
    topo_ = other.topo_;
    other.topo_ = nullptr;
  }
  return *this;
}

Topology::~Topology() {
  if (topo_ != nullptr) hwloc_topology_destroy(topo_);
}

hwloc_obj_t Topology::pciObject(const PciAddress& addr) const {
  return hwloc_get_pcidev_by_busid(topo_, addr.domain, addr.bus, addr.device, addr.function);
}

std::vector<hwloc_obj_t> Topology::gpus() const {
  std::vector<hwloc_obj_t> out;
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(topo_, nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(topo_, obj)) {
    if (isNvidiaGpu(obj)) out.push_back(obj);
  }
  std::sort(out.begin(), out.end(),
            [](hwloc_obj_t a, hwloc_obj_t b) { return pciAddressOf(a) < pciAddressOf(b); });
  return out;
}

PciAddress pciAddressOf(hwloc_obj_t pcidev) {
  const auto& pci = pcidev->attr->pcidev;
  return PciAddress{pci.domain, pci.bus, pci.dev, pci.func};
}

bool isNvidiaGpu(hwloc_obj_t obj) {
  if (obj == nullptr || obj->type != HWLOC_OBJ_PCI_DEVICE) return false;
  const auto& pci = obj->attr->pcidev;
  return pci.vendor_id == 0x10de && (pci.class_id == 0x0302 || pci.class_id == 0x0300);
}

int treeDepth(hwloc_obj_t obj) {
  int depth = 0;
  for (hwloc_obj_t p = obj->parent; p != nullptr; p = p->parent) ++depth;
  return depth;
}

hwloc_obj_t commonAncestor(hwloc_obj_t a, hwloc_obj_t b) {
  int da = treeDepth(a);
  int db = treeDepth(b);
  while (da > db) a = a->parent, --da;
  while (db > da) b = b->parent, --db;
  while (a != b) a = a->parent, b = b->parent;
  return a;
}

int numaNodeOf(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (anchor == nullptr || anchor->nodeset == nullptr) return -1;
  if (hwloc_bitmap_weight(anchor->nodeset) != 1) return -1;
  return hwloc_bitmap_first(anchor->nodeset);
}

std::string cpusetOf(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (anchor == nullptr || anchor->cpuset == nullptr) return "";
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, anchor->cpuset) < 0 || text == nullptr) return "";
  std::string out = text;
  free(text);
  return out;
}

}  // namespace nnf::topology
