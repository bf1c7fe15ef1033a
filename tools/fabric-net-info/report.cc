#include "report.h"

#include <cinttypes>

#include "topology/device_props.h"

namespace nnf::tools {
namespace {

std::string nicId(const topology::Nic& nic) {
  return nic.pci ? nic.pci->str() : nic.name;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if ((unsigned char)c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string joined(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

}  // namespace

std::string planJson(const topology::Plan& plan, const std::vector<topology::Nic>& nics) {
  std::string out = "{\"devices\":[";
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    const topology::Device& device = plan.devices[d];
    std::vector<std::string> gpus, rails;
    for (const auto& gpu : device.gpus) gpus.push_back(jsonString(gpu.str()));
    for (size_t nic : device.nics) rails.push_back(jsonString(nicId(nics[nic])));
    out += (d ? "," : "") + std::string("{\"index\":") + std::to_string(d) + ",\"gpus\":[" +
           joined(gpus, ",") + "],\"nics\":[" + joined(rails, ",") + "]}";
  }
  return out + "]}";
}

void printPlanTable(FILE* out, const topology::Plan& plan, const std::vector<topology::Nic>& nics,
                    const topology::Topology* topo) {
  fprintf(out, "%-4s %-14s %-9s %5s %10s %5s  %-28s %s\n", "dev", "name", "placement", "rails",
          "speed", "numa", "gpus (nearest first)", "rails (leader first)");
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    const topology::Device& device = plan.devices[d];
    std::vector<std::string> gpus, rails;
    for (const auto& gpu : device.gpus) gpus.push_back(gpu.str());
    for (size_t nic : device.nics) rails.push_back(nicId(nics[nic]));
    char speed[32];
    snprintf(speed, sizeof(speed), "%" PRId64 " Gb/s",
             topology::deviceSpeedMbps(device, nics, /*carryingRails=*/1) / 1000);
    std::string numa = device.numaNode >= 0 ? std::to_string(device.numaNode) : "-";
    std::string gpuText = gpus.empty() ? "-" : joined(gpus, ",");
    fprintf(out, "%-4zu %-14s %-9s %5zu %10s %5s  %-28s %s\n", d,
            topology::deviceName(device, nics).c_str(), topology::placementName(device.placement),
            device.nics.size(), speed, numa.c_str(), gpuText.c_str(), joined(rails, " ").c_str());
  }
  fprintf(out, "\nleader PCI paths (pciPath reported to NCCL):\n");
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    auto path = topology::devicePciPath(plan.devices[d], nics, topo);
    fprintf(out, "  dev %zu: %s  guid 0x%016" PRIx64 "\n", d, path ? path->c_str() : "(none)",
            topology::deviceGuid(plan.devices[d], nics, d));
  }
}

}  // namespace nnf::tools
