#include "info.h"

#include <rdma/fabric.h>

#include <optional>

#include "dump_sources.h"
#include "live.h"
#include "plan_report.h"
#include "plugin_loader.h"
#include "topology/nccl_topo_xml.h"

namespace nnf::tools {
namespace {

// The file the plugin would hand NCCL for this plan; gdr "1" since no device was opened to say
// otherwise.
void writeNcclTopo(const InfoOptions& options, const core::NetworkPlan& plan, FILE* err) {
  if (options.ncclTopoFile.empty()) return;
  const core::DevicePlan& devices = plan.devices;
  if (!devices.topo) {
    fprintf(err, "no NCCL topology XML written to %s: the plan has no hwloc topology\n",
            options.ncclTopoFile.c_str());
    return;
  }
  topology::writeNcclTopoFile(options.ncclTopoFile, devices.plan, devices.nics, *devices.topo,
                              /*gdr=*/true, plan.carryingRails);
  fprintf(err, "wrote NCCL topology XML to %s%s\n", options.ncclTopoFile.c_str(),
          topology::needsNcclTopoFile(devices.plan, plan.carryingRails)
              ? ""
              : " (not needed: one NIC carries data per device)");
}

const char* topoFileVerdict(const core::NetworkPlan& plan) {
  return topology::needsNcclTopoFile(plan.devices.plan, plan.carryingRails)
             ? "needed (several NICs carry data per GPU device): the plugin writes it"
             : "not needed";
}

}  // namespace

int runLive(const InfoOptions& options, const config::Config& config,
            const core::PlanSources& sources, FILE* out, FILE* err) {
  std::optional<core::NetworkPlan> plan;
  std::string planFailure;
  try {
    plan.emplace(core::planNetwork(config, sources));
  } catch (const core::PlanError& error) {
    if (error.result() == abi::kInvalidUsage) {
      fprintf(err, "fabric-net-info: %s\n", error.what());
      return 1;
    }
    planFailure = error.what();
  }
  if (options.json) {
    if (!plan) {
      fprintf(err, "fabric-net-info: %s\n", planFailure.c_str());
      return 1;
    }
    writeNcclTopo(options, *plan, err);
    fprintf(out, "%s\n", planJson(*plan).c_str());
    return 0;
  }

  uint32_t v = fi_version();
  fprintf(out, "nccl-net-fabric %s, libfabric %u.%u (runtime), hwloc API 0x%x\n\n", NNF_VERSION,
          FI_MAJOR(v), FI_MINOR(v), (unsigned)hwloc_get_api_version());
  fprintf(out, "== libfabric providers (RDM endpoints, tagged messages: the plugin's choice)\n");
  printProviders(out, sources.query, plan ? plan->choice.provider : "");
  fprintf(out, "\n== configuration\n");
  for (const std::string& line : config.describe()) fprintf(out, "  %s\n", line.c_str());

  if (plan) {
    fprintf(out, "\n== device plan (provider %s, %zu NIC(s))\n", plan->choice.provider.c_str(),
            plan->choice.domains.size());
    printPlanSummary(out, *plan, "  ");
    fprintf(out, "\n");
    printPlanTable(out, *plan);
    fprintf(out, "\nNCCL topology file: %s\n", topoFileVerdict(*plan));
    writeNcclTopo(options, *plan, err);
  } else {
    fprintf(out, "\n== device plan\n  %s\n", planFailure.c_str());
  }

  if (options.plugin) {
    fprintf(out, "\n== plugin devices\n");
    std::string path =
        options.pluginPath.empty() ? defaultPluginPath(NNF_PLUGIN_PATH) : options.pluginPath;
    std::string failure;
    if (!printPluginDevices(out, path, plan ? &*plan : nullptr, &failure)) {
      fflush(out);
      fprintf(err, "fabric-net-info: %s\n", failure.c_str());
      return 1;
    }
  }
  if (!plan) {
    fflush(out);
    fprintf(err, "fabric-net-info: %s\n", planFailure.c_str());
    return 1;
  }
  return 0;
}

int runOffline(const InfoOptions& options, const config::Config& config, FILE* out, FILE* err) {
  core::NetworkPlan plan = core::planNetwork(config, dumpSources(options.topologyFile));
  writeNcclTopo(options, plan, err);
  if (options.json) {
    fprintf(out, "%s\n", planJson(plan).c_str());
    return 0;
  }
  size_t gpus = plan.devices.topo ? plan.devices.topo->gpus().size() : 0;
  fprintf(out, "topology %s: %zu NVIDIA GPU(s), %zu EFA NIC(s), %zu device(s)\n\n",
          options.topologyFile.c_str(), gpus, plan.choice.domains.size(),
          plan.devices.specs.size());
  fprintf(out, "provider %s (the dump's EFA NICs, listed as efa lists them)\n",
          plan.choice.provider.c_str());
  printPlanSummary(out, plan, "");
  fprintf(out, "\n");
  printPlanTable(out, plan);
  fprintf(out, "\nNCCL topology file: %s\n", topoFileVerdict(plan));
  return 0;
}

}  // namespace nnf::tools
