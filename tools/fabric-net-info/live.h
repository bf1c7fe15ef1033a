// Live mode: what this machine offers (libfabric providers, NICs, hwloc plan), the effective
// configuration, and what the built plugin reports through its own ABI.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "topology/planner.h"

namespace nnf::tools {

struct ProviderEntry {
  std::string provider;
  std::string fabric;
  std::string domain;
  topology::Nic nic;
};

// Every FI_EP_RDM fi_info libfabric returns, in its order. Throws std::runtime_error with
// fi_strerror text when fi_getinfo fails for a reason other than "no provider".
std::vector<ProviderEntry> listRdmProviders();

// The provider the plugin would pick: `wanted` when non-empty, else efa when present, else the
// first listed. "" when there is none.
std::string pickProvider(const std::vector<ProviderEntry>& entries, const std::string& wanted);

// That provider's NICs, one per domain, in libfabric order; `defaultMbps` where the provider
// reports no link speed.
std::vector<topology::Nic> nicsOf(const std::vector<ProviderEntry>& entries,
                                  const std::string& provider, int64_t defaultMbps);

// Loads the plugin at `path` (its newest ABI), runs init/devices/getProperties and prints every
// device. On failure returns false with the reason in one line in `failure`; never throws.
bool printPluginDevices(FILE* out, const std::string& path, std::string* failure);

}  // namespace nnf::tools
