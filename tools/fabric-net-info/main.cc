// fabric-net-info: what the plugin sees on this machine (providers, NICs, the plugin's own plan:
// provider, protocol, devices with their rails and GPU affinity; the effective configuration,
// the plugin's own device properties), or, with --topology, the plan it would make on the
// machine an hwloc XML dump describes.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/config.h"
#include "info.h"
#include "platform/env_defaults.h"
#include "platform/provider_rules.h"

namespace {

using namespace nnf;

constexpr const char* kUsage =
    "Usage: fabric-net-info [options]\n"
    "\n"
    "Shows what nccl-net-fabric sees and decides: the libfabric providers it chooses\n"
    "from, the effective configuration (NCCL_FABRIC_*), the plugin's own plan (provider,\n"
    "protocol, NICs grouped into devices around the GPUs they are closest to, the rails that\n"
    "carry data, speeds) and every device the built plugin reports to NCCL, checked against\n"
    "the plan.\n"
    "\n"
    "Options:\n"
    "  --topology FILE         offline: the plan on the machine of an `lstopo --of xml` dump,\n"
    "                          its EFA NICs listed as efa lists them (100/200/400 Gb/s by EFA\n"
    "                          generation), instead of this machine\n"
    "  --json                  print the plan alone, as one line of JSON\n"
    "                          {\"provider\":..,\"protocol\":..,\"devices\":[{\"index\":0,..}]}\n"
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

}  // namespace

int main(int argc, char** argv) {
  tools::InfoOptions opt;
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
  try {
    // A bad NCCL_FABRIC_* value is refused, as the plugin's init refuses it, before anything.
    config::Config cfg = config::Config::load();
    if (!opt.topologyFile.empty()) return tools::runOffline(opt, cfg, stdout, stderr);
    // As the plugin's init does before its first fi_getinfo: efa reads them as it initialises.
    platform::applyEnvDefaults(platform::rulesFor(platform::Family::kEfa));
    return tools::runLive(opt, cfg, core::PlanSources(), stdout, stderr);
  } catch (const config::ConfigError& e) {
    fprintf(stderr, "fabric-net-info: invalid configuration: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fprintf(stderr, "fabric-net-info: %s\n", e.what());
    return 1;
  }
}
