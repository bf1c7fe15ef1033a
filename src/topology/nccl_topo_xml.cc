#include "topology/nccl_topo_xml.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "log/log.h"
#include "topology/device_props.h"

namespace nnf::topology {
namespace {

constexpr const char* kSelfFd = "/proc/self/fd/";

// NCCL's reading of each link speed string, in Gb/s per lane (its table counts 100 Mbps units:
// 15, 30, 60, 120, 240, 480); a link is worth that times its width.
struct PcieGen {
  const char* text;
  double gbpsPerLane;
};
constexpr PcieGen kGens[] = {{"2.5 GT/s PCIe", 1.5},   {"5.0 GT/s PCIe", 3.0},
                             {"8.0 GT/s PCIe", 6.0},   {"16.0 GT/s PCIe", 12.0},
                             {"32.0 GT/s PCIe", 24.0}, {"64.0 GT/s PCIe", 48.0}};

// The slowest x16 (or wider) link that carries `mbps`, so NCCL's path bandwidth is set by the
// GPU's link and the network, never by one rail's PCIe link.
std::pair<const char*, int> linkFor(int64_t mbps) {
  double gbps = (double)mbps / 1000.0;
  for (int width : {16, 32, 64})
    for (const PcieGen& gen : kGens)
      if (gen.gbpsPerLane * width >= gbps) return {gen.text, width};
  return {kGens[5].text, 64};
}

int firstNuma(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (anchor == nullptr || anchor->nodeset == nullptr || hwloc_bitmap_iszero(anchor->nodeset))
    return 0;
  return hwloc_bitmap_first(anchor->nodeset);
}

std::string pciAttrs(hwloc_obj_t obj) {
  const auto& pci = obj->attr->pcidev;
  char buf[160];
  snprintf(buf, sizeof(buf), "busid=\"%s\" class=\"0x%04x00\" vendor=\"0x%04x\" device=\"0x%04x\"",
           pciAddressOf(obj).str().c_str(), pci.class_id, pci.vendor_id, pci.device_id);
  return buf;
}

// The PCI switch both sit under, as NCCL names it (the switch's upstream port); nullptr when
// they only share a host bridge.
hwloc_obj_t switchOf(hwloc_obj_t a, hwloc_obj_t b) {
  hwloc_obj_t common = commonAncestor(a, b);
  if (common->type == HWLOC_OBJ_BRIDGE &&
      common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
    return common;
  return nullptr;
}

struct Container {
  std::vector<std::string> lines;  // children, already formatted
  std::set<std::string> busids;    // avoids listing a GPU twice
};

}  // namespace

bool needsNcclTopoFile(const Plan& plan, size_t carryingRails) {
  for (const Device& device : plan.devices)
    if (!device.gpus.empty() && std::min(device.nics.size(), carryingRails) > 1) return true;
  return false;
}

std::string ncclTopoXml(const Plan& plan, const std::vector<Nic>& nics, const Topology& topo,
                        bool gdr, size_t carryingRails) {
  // numaid -> switch (nullptr: directly under the CPU) -> children.
  std::map<int, std::map<hwloc_obj_t, Container>> cpus;
  for (size_t index = 0; index < plan.devices.size(); ++index) {
    const Device& device = plan.devices[index];
    const Nic& leader = nics.at(device.nics.front());
    if (device.gpus.empty() || !leader.pci) continue;
    hwloc_obj_t nicObj = topo.pciObject(*leader.pci);
    if (nicObj == nullptr) continue;
    int numa = firstNuma(topo.get(), nicObj);

    for (const PciAddress& gpuAddr : device.gpus) {
      hwloc_obj_t gpuObj = topo.pciObject(gpuAddr);
      if (gpuObj == nullptr) continue;
      Container& box = cpus[numa][switchOf(nicObj, gpuObj)];
      if (box.busids.insert(gpuAddr.str()).second)
        box.lines.push_back("<pci " + pciAttrs(gpuObj) + "/>");
    }

    int64_t speed = deviceSpeedMbps(device, nics, carryingRails);
    char net[512];
    snprintf(net, sizeof(net),
             "<nic><net name=\"%s\" dev=\"%zu\" speed=\"%" PRId64 "\" port=\"1\" guid=\"0x%" PRIx64
             "\" gdr=\"%d\"/></nic>",
             leader.name.c_str(), index, speed, deviceGuid(device, nics, index), gdr ? 1 : 0);
    std::string open = "<pci " + pciAttrs(nicObj);
    if (std::min(device.nics.size(), carryingRails) > 1) {
      auto link = linkFor(speed);
      open += " link_speed=\"" + std::string(link.first) + "\" link_width=\"" +
              std::to_string(link.second) + "\"";
    }
    hwloc_obj_t gpuObj = topo.pciObject(device.gpus.front());
    Container& box = cpus[numa][gpuObj != nullptr ? switchOf(nicObj, gpuObj) : nullptr];
    box.busids.insert(leader.pci->str());
    box.lines.push_back(open + ">");
    box.lines.push_back("  " + std::string(net));
    box.lines.push_back("</pci>");
  }

  std::string xml = "<system version=\"1\">\n";
  for (const auto& [numa, switches] : cpus) {
    xml += "  <cpu numaid=\"" + std::to_string(numa) + "\">\n";
    for (const auto& [sw, box] : switches) {
      std::string indent = "    ";
      if (sw != nullptr) {
        const auto& up = sw->attr->bridge.upstream.pci;
        xml += indent + "<pci busid=\"" + PciAddress{up.domain, up.bus, up.dev, up.func}.str() +
               "\" class=\"0x060400\">\n";
        indent += "  ";
      }
      for (const std::string& line : box.lines) xml += indent + line + "\n";
      if (sw != nullptr) xml += "    </pci>\n";
    }
    xml += "  </cpu>\n";
  }
  xml += "</system>\n";
  return xml;
}

void writeNcclTopoFile(const std::string& path, const Plan& plan, const std::vector<Nic>& nics,
                       const Topology& topo, bool gdr, size_t carryingRails) {
  std::string xml = ncclTopoXml(plan, nics, topo, gdr, carryingRails);
  std::ofstream out(path, std::ios::trunc);
  out << xml;
  out.close();
  if (!out) throw TopologyError("could not write the NCCL topology file " + path);
}

std::string exportNcclTopoFile(const Plan& plan, const std::vector<Nic>& nics, const Topology& topo,
                               bool gdr, size_t carryingRails) {
  if (!needsNcclTopoFile(plan, carryingRails)) return "";
  const char* user = getenv("NCCL_TOPO_FILE");
  bool inheritedStale =
      user != nullptr && strncmp(user, kSelfFd, strlen(kSelfFd)) == 0 && access(user, R_OK) != 0;
  if (user != nullptr && user[0] != '\0' && !inheritedStale) {
    NNF_INFO(abi::kLogSubsysInit, "NCCL_TOPO_FILE=%s set by the user; not writing our own", user);
    return "";
  }
  std::string xml = ncclTopoXml(plan, nics, topo, gdr, carryingRails);
  // Not close-on-exec: a child that execs keeps the file its inherited variable names.
  int fd = memfd_create("nccl-net-fabric-topo.xml", 0);
  size_t written = 0;
  while (fd >= 0 && written < xml.size()) {
    ssize_t n = write(fd, xml.data() + written, xml.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  if (fd < 0 || written != xml.size()) {
    NNF_WARN(
        "could not write the NCCL topology file (%s); NCCL will see each device as its "
        "leader NIC's PCIe link",
        strerror(errno));
    if (fd >= 0) close(fd);
    return "";
  }
  std::string path = kSelfFd + std::to_string(fd);
  setenv("NCCL_TOPO_FILE", path.c_str(), 1);
  NNF_INFO(abi::kLogSubsysInit, "NCCL_TOPO_FILE=%s (multi-NIC devices placed for NCCL, gdr=%d)",
           path.c_str(), gdr ? 1 : 0);
  return path;
}

}  // namespace nnf::topology
