#include "platform/env_defaults.h"

#include <cstdlib>
#include <cstring>
#include <string>

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

ProtoDecision decideProto(bool ll128Ok, const char* userProto) {
  ProtoDecision decision;
  if (ll128Ok) {
    decision.message = "128-byte aligned delivery is in order: NCCL's LL and LL128 protocols are safe";
    return decision;
  }
  if (userProto == nullptr || userProto[0] == '\0') {
    decision.action = ProtoDecision::Action::kExcludeLL128;
    decision.message =
        "the provider cannot guarantee 128-byte in-order delivery of the protocol's data: setting "
        "NCCL_PROTO=^LL128 (LL128 would read torn lines; LL and Simple stay). NCCL offers no "
        "per-network protocol choice, so this applies to NVLink too; an EFA device whose queues "
        "order 128-byte blocks (FI_OPT_EFA_*_IN_ORDER_ALIGNED_128_BYTES) brings LL128 back";
  } else if (protoMayEnableLL128(userProto)) {
    decision.action = ProtoDecision::Action::kWarnUserSetting;
    decision.message = std::string("NCCL_PROTO=") + userProto +
                       " enables LL128, but the provider cannot guarantee 128-byte in-order "
                       "delivery: data may be corrupted; use NCCL_PROTO=^LL128";
  } else {
    decision.message = std::string("NCCL_PROTO=") + userProto +
                       " keeps LL128 off, as the provider's unordered delivery needs";
  }
  return decision;
}

void applyProto(const ProtoDecision& decision) {
  switch (decision.action) {
    case ProtoDecision::Action::kNothing:
      if (!decision.message.empty()) NNF_INFO(abi::kLogSubsysInit, "%s", decision.message.c_str());
      return;
    case ProtoDecision::Action::kExcludeLL128:
      setenv("NCCL_PROTO", "^LL128", 0);
      NNF_WARN("%s", decision.message.c_str());
      return;
    case ProtoDecision::Action::kWarnUserSetting:
      NNF_WARN("%s", decision.message.c_str());
      return;
  }
}

}  // namespace nnf::platform
