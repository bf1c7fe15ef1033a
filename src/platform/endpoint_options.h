// What the provider answered to each endpoint option, and what that means for the device.
#pragma once

#include <vector>

#include "platform/provider_rules.h"

namespace nnf::platform {

struct OptionResult {
  EndpointOption option;
  int rc = 0;  // 0: set; else the negative libfabric error of fi_setopt
};

struct OptionVerdict {
  bool hostMemoryOnly = false;
  bool noLL128 = false;
  bool noReadFlush = false;
};

// Pure: folds the refusals into what the device must give up.
OptionVerdict verdictOf(const std::vector<OptionResult>& results);

// One INFO line per option set, one WARN naming the remedy per refusal.
void logOptionResults(const char* deviceName, const std::vector<OptionResult>& results);

}  // namespace nnf::platform
