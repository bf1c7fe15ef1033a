#include "plan_report.h"

#include <cinttypes>
#include <vector>

#include "topology/planner.h"

namespace nnf::tools {
namespace {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
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

std::string jsonArray(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& item : items) quoted.push_back(jsonString(item));
  return "[" + joined(quoted, ",") + "]";
}

std::string guidText(uint64_t guid) {
  char text[24];
  snprintf(text, sizeof(text), "0x%016" PRIx64, guid);
  return text;
}

// "400 Gb/s", "1.5 Gb/s": the device's speed as NCCL gets it, in Mbps.
std::string speedText(int mbps) {
  char text[32];
  snprintf(text, sizeof(text), "%g Gb/s", mbps / 1000.0);
  return text;
}

// Each rail by PCI address, or by name where it has none.
std::vector<std::string> railAddresses(const core::DevicePlan& devices, size_t index) {
  std::vector<std::string> out;
  for (size_t nic : devices.plan.devices[index].nics) {
    const topology::Nic& rail = devices.nics[nic];
    out.push_back(rail.pci ? rail.pci->str() : rail.name);
  }
  return out;
}

std::vector<std::string> carryingOf(const core::DeviceSpec& spec) {
  return std::vector<std::string>(spec.railNames.begin(),
                                  spec.railNames.begin() + static_cast<long>(spec.carryingRails));
}

}  // namespace

std::string planJson(const core::NetworkPlan& plan) {
  const core::DevicePlan& devices = plan.devices;
  std::string out = "{\"provider\":" + jsonString(plan.choice.provider) +
                    ",\"protocol\":" + jsonString(plan.protocolName()) +
                    ",\"carryingRails\":" + std::to_string(plan.carryingRails) + ",\"devices\":[";
  for (size_t d = 0; d < devices.specs.size(); ++d) {
    const core::DeviceSpec& spec = devices.specs[d];
    const core::DeviceProperties& props = spec.properties;
    const topology::Device& planned = devices.plan.devices[d];
    out += std::string(d ? "," : "") + "{\"index\":" + std::to_string(d) +
           ",\"name\":" + jsonString(props.name) +
           ",\"placement\":" + jsonString(topology::placementName(planned.placement)) +
           ",\"numa\":" + std::to_string(planned.numaNode) +
           ",\"speedMbps\":" + std::to_string(props.speedMbps) +
           ",\"pciPath\":" + (props.pciPath.empty() ? "null" : jsonString(props.pciPath)) +
           ",\"guid\":" + jsonString(guidText(props.guid)) + ",\"gpus\":" + jsonArray(spec.gpus) +
           ",\"nics\":" + jsonArray(railAddresses(devices, d)) +
           ",\"rails\":" + jsonArray(spec.railNames) +
           ",\"carrying\":" + jsonArray(carryingOf(spec)) + "}";
  }
  return out + "]}";
}

void printPlanSummary(FILE* out, const core::NetworkPlan& plan, const char* indent) {
  fprintf(out, "%sprotocol %s: %s\n", indent, plan.protocolName(), plan.protocol.reason.c_str());
  if (plan.devices.topo) {
    fprintf(out, "%shwloc: %zu NVIDIA GPU(s)\n", indent, plan.devices.topo->gpus().size());
  } else {
    fprintf(out, "%shwloc: not used (no NIC with PCI data, or no topology): one device per NIC\n",
            indent);
  }
}

void printPlanTable(FILE* out, const core::NetworkPlan& plan) {
  const core::DevicePlan& devices = plan.devices;
  fprintf(out, "%-4s %-16s %-9s %5s %5s %10s %5s  %-28s %s\n", "dev", "name", "placement", "rails",
          "carry", "speed", "numa", "gpus (nearest first)", "rails (leader first, * carries data)");
  for (size_t d = 0; d < devices.specs.size(); ++d) {
    const core::DeviceSpec& spec = devices.specs[d];
    const topology::Device& planned = devices.plan.devices[d];
    std::vector<std::string> rails;
    for (size_t r = 0; r < spec.railNames.size(); ++r) {
      rails.push_back(spec.railNames[r] + (r < spec.carryingRails ? "*" : ""));
    }
    std::string numa = planned.numaNode >= 0 ? std::to_string(planned.numaNode) : "-";
    std::string gpus = spec.gpus.empty() ? "-" : joined(spec.gpus, ",");
    fprintf(out, "%-4zu %-16s %-9s %5zu %5zu %10s %5s  %-28s %s\n", d, spec.properties.name.c_str(),
            topology::placementName(planned.placement), spec.railNames.size(), spec.carryingRails,
            speedText(spec.properties.speedMbps).c_str(), numa.c_str(), gpus.c_str(),
            joined(rails, " ").c_str());
  }
  fprintf(out, "\npciPath and guid reported to NCCL (the leader's):\n");
  for (size_t d = 0; d < devices.specs.size(); ++d) {
    const core::DeviceProperties& props = devices.specs[d].properties;
    fprintf(out, "  dev %zu: %s  guid %s\n", d,
            props.pciPath.empty() ? "(none)" : props.pciPath.c_str(), guidText(props.guid).c_str());
  }
}

}  // namespace nnf::tools
