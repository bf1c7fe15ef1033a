#include "core/device_plan.h"

#include <algorithm>
#include <climits>
#include <optional>

#include "core/tags.h"
#include "log/log.h"
#include "topology/device_props.h"
#include "topology/hwloc_topology.h"
#include "topology/nccl_topo_xml.h"
#include "topology/planner.h"
#include "topology/rails.h"

namespace nnf::core {
namespace {

std::optional<topology::PciAddress> pciOf(const fi_info* info) {
  if (info->nic == nullptr || info->nic->bus_attr == nullptr ||
      info->nic->bus_attr->bus_type != FI_BUS_PCI) {
    return std::nullopt;
  }
  const fi_pci_attr& pci = info->nic->bus_attr->attr.pci;
  topology::PciAddress address;
  address.domain = pci.domain_id;
  address.bus = pci.bus_id;
  address.device = pci.device_id;
  address.function = pci.function_id;
  return address;
}

int64_t speedOf(const fi_info* info, int64_t defaultMbps) {
  if (info->nic != nullptr && info->nic->link_attr != nullptr && info->nic->link_attr->speed > 0) {
    return static_cast<int64_t>(info->nic->link_attr->speed / 1000000);
  }
  return defaultMbps;
}

}  // namespace

DevicePlan planDevices(const fabric::ProviderChoice& choice, const config::Config& config,
                       size_t carryingRails,
                       const std::function<topology::Topology()>& loadTopology) {
  DevicePlan result;
  std::vector<topology::Nic>& nics = result.nics;
  for (const fabric::InfoPtr& info : choice.domains) {
    topology::Nic nic;
    nic.name = info->domain_attr->name;
    nic.pci = pciOf(info.get());
    nic.speedMbps = speedOf(info.get(), config.integer(config::Param::kDefaultSpeedMbps));
    nics.push_back(nic);
  }
  topology::RailGroups rails = topology::parseRailGroups(config.string(config::Param::kRails));

  // Only NICs with PCI data need the machine's topology.
  std::optional<topology::Topology>& topo = result.topo;
  bool anyPci = std::any_of(nics.begin(), nics.end(), [](const auto& nic) { return nic.pci; });
  if (anyPci) {
    try {
      topo.emplace(loadTopology());
    } catch (const std::exception& error) {
      NNF_INFO(abi::kLogSubsysInit, "hwloc topology unavailable (%s): one device per NIC",
               error.what());
    }
  }
  result.plan = topology::planDevices(nics, topo ? &*topo : nullptr, rails);
  const topology::Plan& plan = result.plan;

  std::vector<DeviceSpec>& specs = result.specs;
  for (size_t index = 0; index < plan.devices.size(); ++index) {
    const topology::Device& planned = plan.devices[index];
    DeviceSpec spec;
    DeviceProperties& props = spec.properties;
    for (size_t nic : planned.nics) {
      const fi_info* info = choice.domains[nic].get();
      spec.rails.push_back(info);
      spec.railNames.push_back(nics[nic].name);
      if (info->ep_attr != nullptr && info->ep_attr->max_msg_size > 0) {
        props.maxMessageBytes = std::min(props.maxMessageBytes, info->ep_attr->max_msg_size);
      }
    }
    spec.carryingRails = std::min(carryingRails, spec.rails.size());
    for (const topology::PciAddress& gpu : planned.gpus) spec.gpus.push_back(gpu.str());
    props.name = topology::deviceName(planned, nics);
    props.pciPath = topology::devicePciPath(planned, nics, topo ? &*topo : nullptr).value_or("");
    props.guid = topology::deviceGuid(planned, nics, index);
    props.speedMbps = static_cast<int>(
        std::min<int64_t>(topology::deviceSpeedMbps(planned, nics, carryingRails), INT_MAX));
    props.latencyUs = static_cast<float>(config.integer(config::Param::kDeviceLatencyUs));
    props.maxComms = static_cast<int>(tags::kMaxCommId);
    props.maxRecvs = static_cast<int>(config.integer(config::Param::kMaxRecvs));
    specs.push_back(std::move(spec));
  }

  return result;
}

void exportTopology(const DevicePlan& plan, bool gdr, size_t carryingRails) {
  if (!plan.topo) return;
  topology::exportNcclTopoFile(plan.plan, plan.nics, *plan.topo, gdr, carryingRails);
}

}  // namespace nnf::core
