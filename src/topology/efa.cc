#include "topology/efa.h"

#include <algorithm>

namespace nnf::topology {

bool isEfaDevice(unsigned vendorId, unsigned deviceId) {
  return vendorId == 0x1d0f && (deviceId & 0xfff0) == 0xefa0;
}

int64_t efaSpeedMbps(unsigned deviceId) {
  switch (deviceId) {
    case 0xefa0:
    case 0xefa1:
      return 100000;
    case 0xefa2:
      return 200000;
    default:
      return 400000;
  }
}

std::vector<Nic> listEfaNics(const Topology& topo) {
  std::vector<Nic> out;
  hwloc_topology_t t = topo.get();
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(t, nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(t, obj)) {
    const auto& pci = obj->attr->pcidev;
    if (!isEfaDevice(pci.vendor_id, pci.device_id)) continue;
    Nic nic;
    nic.pci = pciAddressOf(obj);
    nic.name = nic.pci->str();
    for (hwloc_obj_t child = obj->io_first_child; child != nullptr; child = child->next_sibling) {
      if (child->type == HWLOC_OBJ_OS_DEVICE &&
          child->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && child->name != nullptr) {
        nic.name = child->name;
        break;
      }
    }
    nic.speedMbps = efaSpeedMbps(pci.device_id);
    out.push_back(std::move(nic));
  }
  std::sort(out.begin(), out.end(), [](const Nic& a, const Nic& b) { return *a.pci < *b.pci; });
  return out;
}

}  // namespace nnf::topology
