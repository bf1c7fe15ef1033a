// The rma mode: the plugin's RMA table (rma_plugin_engine.h) and raw libfabric RMA
// (rma_raw_engine.h) over the same size sweep, taking turns point by point (rma_runner.h).
#pragma once

#include <string>

#include "bootstrap.h"
#include "options.h"
#include "report.h"

namespace nnf::perf {

// Runs the sweep on this rank; rank 0's rows and engine descriptions go into *report. False
// with *error on a transport error, a timeout or corrupt data.
bool runRmaMode(Bootstrap& boot, const Options& opts, const std::string& provider,
                const std::string& pluginPath, Report* report, std::string* error);

}  // namespace nnf::perf
