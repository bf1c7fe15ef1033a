// Environment the plugin sets for libfabric and NCCL, only where the user has not.
#pragma once

#include <string>

#include "platform/nccl_proto.h"
#include "platform/provider_rules.h"

namespace nnf::platform {

// Sets each of the rules' defaults that is unset, one INFO line each. Must run before the first
// fi_getinfo: providers read their variables when libfabric initialises them.
void applyEnvDefaults(const ProviderRules& rules);

// LL128 over an unordered provider without the in-order-128 guarantee can read torn lines; LL
// cannot (each of its 8-byte words carries its own flag and lands whole).
struct ProtoDecision {
  enum class Action { kNothing, kExcludeLL128, kWarnUserSetting } action = Action::kNothing;
  std::string message;
};
// Pure: `ll128Ok` is false when some device lacks the guarantee; `userProto` is NCCL_PROTO
// (null when unset).
ProtoDecision decideProto(bool ll128Ok, const char* userProto);
// Logs the decision and sets NCCL_PROTO=^LL128 where it says so.
void applyProto(const ProtoDecision& decision);

}  // namespace nnf::platform
