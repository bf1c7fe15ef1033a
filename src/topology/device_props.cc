#include "topology/device_props.h"

#include <algorithm>

#include <sys/stat.h>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "topology/fnv1a.h"

namespace nnf::topology {
namespace {

std::string busIdText(uint32_t domain, uint32_t bus) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%04x:%02x", domain, bus);
  return buf;
}

// Linux names the root of each PCI hierarchy pci<domain>:<root bus> and nests every bridge's
// function below it, which is exactly the chain of hwloc bridges above the device.
std::string rebuildFromHwloc(hwloc_obj_t obj, const std::string& sysRoot) {
  std::string path;
  for (hwloc_obj_t p = obj; p != nullptr; p = p->parent) {
    if (p->type == HWLOC_OBJ_PCI_DEVICE) {
      path = "/" + pciAddressOf(p).str() + path;
    } else if (p->type == HWLOC_OBJ_BRIDGE) {
      const auto& bridge = p->attr->bridge;
      if (bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
        const auto& up = bridge.upstream.pci;
        path = "/" + PciAddress{up.domain, up.bus, up.dev, up.func}.str() + path;
      } else {
        path = "/pci" +
               busIdText(bridge.downstream.pci.domain, bridge.downstream.pci.secondary_bus) + path;
        break;
      }
    }
  }
  return sysRoot + "/devices" + path;
}

}  // namespace

std::string sysfsPciPath(const PciAddress& addr, const Topology* topo, const std::string& sysRoot) {
  std::string link = sysRoot + "/bus/pci/devices/" + addr.str();
  char resolved[PATH_MAX];
  if (realpath(link.c_str(), resolved) != nullptr) return resolved;
  if (topo != nullptr) {
    hwloc_obj_t obj = topo->pciObject(addr);
    if (obj != nullptr) return rebuildFromHwloc(obj, sysRoot);
  }
  return link;
}

std::optional<std::string> devicePciPath(const Device& device, const std::vector<Nic>& nics,
                                         const Topology* topo, const std::string& sysRoot) {
  const Nic& leader = nics.at(device.nics.front());
  if (!leader.pci) return std::nullopt;
  return sysfsPciPath(*leader.pci, topo, sysRoot);
}

int64_t deviceSpeedMbps(const Device& device, const std::vector<Nic>& nics, size_t carryingRails) {
  int64_t sum = 0;
  size_t count = std::min(carryingRails, device.nics.size());
  for (size_t i = 0; i < count; ++i) sum += nics.at(device.nics[i]).speedMbps;
  return sum;
}

const std::string& deviceName(const Device& device, const std::vector<Nic>& nics) {
  return nics.at(device.nics.front()).name;
}

uint64_t deviceGuid(const Device& device, const std::vector<Nic>& nics, size_t index) {
  const Nic& leader = nics.at(device.nics.front());
  std::string key = (leader.pci ? leader.pci->str() : leader.name) + "#" + std::to_string(index);
  return fnv1a64(key);
}

}  // namespace nnf::topology
