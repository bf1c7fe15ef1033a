// Live mode's two views besides the plan: the providers libfabric offers the plugin, and what the
// built plugin reports through its own ABI, checked against the plan.
#pragma once

#include <cstdio>
#include <string>

#include "core/network_plan.h"
#include "fabric/provider.h"

namespace nnf::tools {

// Every provider and domain that answers the plugin's own fi_getinfo hints (`query`), one line
// each, marking the provider `chosen` and those skipped unless named (fabric::skippedByDefault).
void printProviders(FILE* out, const fabric::InfoQuery& query, const std::string& chosen);

// Loads the plugin at `path` (its newest ABI), runs init/devices/getProperties and prints every
// device; with a `plan`, says for each whether it is what the plan says (name, pciPath, guid,
// speed). On failure returns false with the reason in one line in `failure`; never throws.
bool printPluginDevices(FILE* out, const std::string& path, const core::NetworkPlan* plan,
                        std::string* failure);

}  // namespace nnf::tools
