// fabric-net-info's two modes, apart from option parsing so that tests run them on facts of their
// own (core::PlanSources). Every decision they print is the plugin's: core::planNetwork.
#pragma once

#include <cstdio>
#include <string>

#include "config/config.h"
#include "core/network_plan.h"

namespace nnf::tools {

struct InfoOptions {
  std::string topologyFile;  // offline: plan the machine of this hwloc dump
  std::string ncclTopoFile;  // also write the NCCL topology XML of the plan here
  std::string pluginPath;    // "": tools::defaultPluginPath
  bool json = false;         // the plan alone, as one line of JSON (plan_report.h)
  bool plugin = true;        // live: load the plugin and print what it reports
};

// This machine, as `sources` describe it: providers, configuration, the plan, then the plugin's
// own devices checked against the plan. Returns the exit status (0, or 1 with the reason on the
// last line of `err`). A plan refused for misconfiguration ends it at once; one without a usable
// provider is printed and the plugin is still loaded, to say the same in its own words.
int runLive(const InfoOptions& options, const config::Config& config,
            const core::PlanSources& sources, FILE* out, FILE* err);

// The machine of options.topologyFile, with its EFA NICs as efa would list them (dump_sources.h).
// Throws what loading the dump or planning throws (std::exception, one line).
int runOffline(const InfoOptions& options, const config::Config& config, FILE* out, FILE* err);

}  // namespace nnf::tools
