#include "platform/env_defaults.h"

#include <cstdlib>
#include <cstring>

#include "log/log.h"

namespace nnf::platform {

void applyEnvDefaults(const ProviderRules& rules) {
  for (const EnvDefault& item : rules.envDefaults) {
    const char* user = getenv(item.name);
    if (user != nullptr) {
      NNF_INFO(abi::kLogSubsysInit | abi::kLogSubsysEnv, "%s=%s kept as the user set it", item.name,
               user);
      continue;
    }
    setenv(item.name, item.value, 0);
    NNF_INFO(abi::kLogSubsysInit | abi::kLogSubsysEnv, "setting %s=%s for %s (%s)", item.name,
             item.value, familyName(rules.family), item.why);
  }
}

namespace {

// NCCL_PROTO is a list ("Simple", "LL,LL128", "^LL128"); any mention of LL without a leading
// '^' may enable a low-latency protocol.
bool mayEnableLowLatency(const char* proto) {
  if (proto[0] == '^') return false;
  for (const char* p = proto; (p = strstr(p, "LL")) != nullptr; p += 2) {
    if (p == proto || p[-1] == ',' || p[-1] == ' ') return true;
  }
  return false;
}

}  // namespace

ProtoDecision decideProto(bool orderingOk, const char* userProto) {
  ProtoDecision decision;
  if (orderingOk) {
    decision.message = "128-byte aligned delivery is in order: NCCL's LL/LL128 protocols are safe";
    return decision;
  }
  if (userProto == nullptr || userProto[0] == '\0') {
    decision.action = ProtoDecision::Action::kSetSimple;
    decision.message =
        "the provider cannot guarantee 128-byte in-order delivery: setting NCCL_PROTO=Simple "
        "(LL/LL128 would read torn data)";
  } else if (mayEnableLowLatency(userProto)) {
    decision.action = ProtoDecision::Action::kWarnUserSetting;
    decision.message = std::string("NCCL_PROTO=") + userProto +
                       " enables LL/LL128, but the provider cannot guarantee 128-byte in-order "
                       "delivery: data may be corrupted; use NCCL_PROTO=Simple";
  }
  return decision;
}

void applyProto(const ProtoDecision& decision) {
  switch (decision.action) {
    case ProtoDecision::Action::kNothing:
      if (!decision.message.empty()) NNF_INFO(abi::kLogSubsysInit, "%s", decision.message.c_str());
      return;
    case ProtoDecision::Action::kSetSimple:
      setenv("NCCL_PROTO", "Simple", 0);
      NNF_WARN("%s", decision.message.c_str());
      return;
    case ProtoDecision::Action::kWarnUserSetting:
      NNF_WARN("%s", decision.message.c_str());
      return;
  }
}

}  // namespace nnf::platform
