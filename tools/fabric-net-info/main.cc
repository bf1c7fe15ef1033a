// fabric-net-info: what the plugin sees on this machine (providers, NICs, the device plan with
// rails and GPU affinity, the effective configuration, the plugin's own device properties), or,
// with --topology, the plan it would make on the machine an hwloc XML dump describes.
#include <rdma/fabric.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "config/config.h"
#include "live.h"
#include "plugin_loader.h"
#include "report.h"
#include "topology/efa.h"
#include "topology/hwloc_topology.h"
#include "topology/nccl_topo_xml.h"
#include "topology/planner.h"
#include "topology/rails.h"

namespace {

using namespace nnf;

constexpr const char* kUsage =
    "Usage: fabric-net-info [options]\n"
    "\n"
    "Shows what nccl-net-fabric sees: libfabric providers (FI_EP_RDM), the effective\n"
    "configuration (NCCL_FABRIC_*), the device plan (NICs grouped into rails around the GPUs\n"
    "they are closest to) and every device the built plugin reports to NCCL.\n"
    "\n"
    "Options:\n"
    "  --topology FILE         offline: plan the EFA NICs of an `lstopo --of xml` dump\n"
    "                          (100/200/400 Gb/s per NIC by EFA generation) instead of this\n"
    "                          machine\n"
    "  --json                  with --topology: print the plan as JSON only\n"
    "                          {\"devices\":[{\"index\":0,\"gpus\":[...],\"nics\":[...]}]}\n"
    "  --write-nccl-topo FILE  also write the NCCL topology XML for the plan to FILE\n"
    "  --plugin PATH           plugin library to load (default: NNF_PLUGIN, else the one\n"
    "                          installed beside this tool (../lib), else the built one)\n"
    "  --no-plugin             do not load the plugin\n"
    "  -h, --help              this text\n"
    "\n"
    "NCCL_FABRIC_RAILS groups NICs by name by hand (\"eth0,eth1;eth2\"); it applies here too.\n"
    "\n"
    "Exit status: 0 when everything loads; 1 when the configuration is invalid or the plugin\n"
    "cannot be loaded or initialised (the reason on the last line); 2 for a usage error.\n";

struct Options {
  std::string topologyFile;
  std::string ncclTopoFile;
  std::string pluginPath;
  bool json = false;
  bool plugin = true;
};

// A bad NCCL_FABRIC_* value is refused, as the plugin's init refuses it: config::ConfigError
// reaches main, which prints it in one line and exits 1.
config::Config loadConfig() {
  return config::Config::load();
}

topology::RailGroups railsFrom(const config::Config& cfg) {
  return topology::parseRailGroups(cfg.string(config::Param::kRails));
}

// The sendrecv protocol carries data on each device's leader NIC: report what the plugin does.
constexpr size_t kCarryingRails = 1;

void writeNcclTopo(const Options& opt, const topology::Plan& plan,
                   const std::vector<topology::Nic>& nics, const topology::Topology& topo) {
  if (opt.ncclTopoFile.empty()) return;
  topology::writeNcclTopoFile(opt.ncclTopoFile, plan, nics, topo, /*gdr=*/true, kCarryingRails);
  fprintf(stderr, "wrote NCCL topology XML to %s%s\n", opt.ncclTopoFile.c_str(),
          topology::needsNcclTopoFile(plan, kCarryingRails)
              ? ""
              : " (not needed: one NIC carries data per device)");
}

int runOffline(const Options& opt) {
  config::Config cfg = loadConfig();
  topology::RailGroups rails = railsFrom(cfg);
  topology::Topology topo = topology::Topology::fromXmlFile(opt.topologyFile);
  std::vector<topology::Nic> nics = topology::listEfaNics(topo);
  topology::Plan plan = topology::planDevices(nics, &topo, rails);
  writeNcclTopo(opt, plan, nics, topo);
  if (opt.json) {
    printf("%s\n", tools::planJson(plan, nics).c_str());
    return 0;
  }
  printf("topology %s: %zu NVIDIA GPU(s), %zu EFA NIC(s), %zu device(s)\n\n",
         opt.topologyFile.c_str(), topo.gpus().size(), nics.size(), plan.devices.size());
  tools::printPlanTable(stdout, plan, nics, &topo);
  printf("\nNCCL topology file: %s\n", topology::needsNcclTopoFile(plan, kCarryingRails)
                                           ? "needed (several NICs carry data per GPU device)"
                                           : "not needed");
  return 0;
}

int runLive(const Options& opt) {
  config::Config cfg = loadConfig();
  topology::RailGroups rails = railsFrom(cfg);
  uint32_t v = fi_version();
  printf("nccl-net-fabric %s, libfabric %u.%u (runtime), hwloc API 0x%x\n\n", NNF_VERSION,
         FI_MAJOR(v), FI_MINOR(v), (unsigned)hwloc_get_api_version());

  std::vector<tools::ProviderEntry> entries;
  printf("== libfabric providers (FI_EP_RDM)\n");
  try {
    entries = tools::listRdmProviders();
  } catch (const std::exception& e) {
    printf("  %s\n", e.what());
  }
  if (entries.empty()) printf("  none\n");
  // libfabric lists one fi_info per capability set; one line per provider and domain is enough.
  std::set<std::string> shown;
  for (const auto& e : entries) {
    if (!shown.insert(e.provider + "/" + e.domain).second) continue;
    printf("  %-12s domain %-16s nic %-16s pci %-12s speed %s\n", e.provider.c_str(),
           e.domain.c_str(), e.nic.name.c_str(), e.nic.pci ? e.nic.pci->str().c_str() : "-",
           e.nic.speedMbps > 0 ? (std::to_string(e.nic.speedMbps) + " Mbps").c_str() : "-");
  }

  printf("\n== configuration\n");
  for (const std::string& line : cfg.describe()) printf("  %s\n", line.c_str());

  std::string provider = tools::pickProvider(entries, cfg.string(config::Param::kProvider));
  std::vector<topology::Nic> nics =
      tools::nicsOf(entries, provider, cfg.integer(config::Param::kDefaultSpeedMbps));
  printf("\n== device plan (provider %s, %zu NIC(s))\n",
         provider.empty() ? "none" : provider.c_str(), nics.size());
  std::unique_ptr<topology::Topology> topo;
  try {
    topo = std::make_unique<topology::Topology>(topology::Topology::fromSystem());
    printf("  hwloc: %zu NVIDIA GPU(s)\n", topo->gpus().size());
  } catch (const topology::TopologyError& e) {
    printf("  %s; planning without it\n", e.what());
  }
  topology::Plan plan = topology::planDevices(nics, topo.get(), rails);
  tools::printPlanTable(stdout, plan, nics, topo.get());
  if (topo) writeNcclTopo(opt, plan, nics, *topo);

  if (opt.plugin) {
    printf("\n== plugin devices\n");
    std::string path =
        opt.pluginPath.empty() ? tools::defaultPluginPath(NNF_PLUGIN_PATH) : opt.pluginPath;
    std::string failure;
    if (!tools::printPluginDevices(stdout, path, &failure)) {
      fflush(stdout);
      fprintf(stderr, "fabric-net-info: %s\n", failure.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n\n%s", name, kUsage);
        exit(2);
      }
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      printf("%s", kUsage);
      return 0;
    } else if (arg == "--topology") {
      opt.topologyFile = value("--topology");
    } else if (arg == "--json") {
      opt.json = true;
    } else if (arg == "--write-nccl-topo") {
      opt.ncclTopoFile = value("--write-nccl-topo");
    } else if (arg == "--plugin") {
      opt.pluginPath = value("--plugin");
    } else if (arg == "--no-plugin") {
      opt.plugin = false;
    } else {
      fprintf(stderr, "unknown option %s\n\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (opt.json && opt.topologyFile.empty()) {
    fprintf(stderr, "--json needs --topology FILE\n");
    return 2;
  }
  try {
    return opt.topologyFile.empty() ? runLive(opt) : runOffline(opt);
  } catch (const config::ConfigError& e) {
    fprintf(stderr, "fabric-net-info: invalid configuration: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fprintf(stderr, "fabric-net-info: %s\n", e.what());
    return 1;
  }
}
