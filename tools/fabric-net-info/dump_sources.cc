#include "dump_sources.h"

#include <rdma/fabric.h>

#include "topology/efa.h"
#include "topology/planner.h"

namespace nnf::tools {

std::string udevRdmaName(const topology::PciAddress& address) {
  std::string name = "rdma";
  if (address.domain != 0) name += "P" + std::to_string(address.domain);
  name += "p" + std::to_string(address.bus) + "s" + std::to_string(address.device);
  if (address.function != 0) name += "f" + std::to_string(address.function);
  return name;
}

std::vector<InfoEntry> efaEntriesOf(const topology::Topology& topo) {
  std::vector<InfoEntry> entries;
  for (const topology::Nic& nic : topology::listEfaNics(topo)) {
    InfoEntry entry;
    entry.provider = "efa";
    entry.fabric = "efa";
    // listEfaNics names a NIC without an OpenFabrics device by its address; efa never does.
    entry.device = nic.name == nic.pci->str() ? udevRdmaName(*nic.pci) : nic.name;
    entry.domain = entry.device + "-rdm";
    entry.pci = nic.pci;
    entry.speedBps = static_cast<uint64_t>(nic.speedMbps) * 1000000;
    entry.caps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_RMA | FI_READ | FI_WRITE |
                 FI_REMOTE_READ | FI_REMOTE_WRITE | FI_HMEM;
    entry.cqDataSize = 4;
    entries.push_back(std::move(entry));
  }
  return entries;
}

core::PlanSources dumpSources(const std::string& xmlPath) {
  core::PlanSources sources;
  sources.query = queryFrom(efaEntriesOf(topology::Topology::fromXmlFile(xmlPath)));
  sources.probeBool = [](const fi_info*, int, int, bool* value) {
    *value = false;
    return 0;
  };
  sources.topology = [xmlPath] { return topology::Topology::fromXmlFile(xmlPath); };
  sources.cudaUsable = [](const config::Config&) { return true; };
  return sources;
}

}  // namespace nnf::tools
