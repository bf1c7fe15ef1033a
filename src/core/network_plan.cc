#include "core/network_plan.h"

#include "fabric/probe.h"
#include "log/log.h"
#include "memory/cuda_driver.h"
#include "memory/gdr_policy.h"
#include "memory/region.h"
#include "platform/provider_rules.h"

namespace nnf::core {

PlanSources::PlanSources()
    : probeBool(fabric::probeEndpointBool), cudaUsable([](const config::Config& config) {
        return memory::CudaDriver::fromConfig(config).available();
      }) {}

namespace {

// Whether the provider's RMA writes are emulated in software: one NIC answers for all (the NICs
// of one instance are of one kind).
bool probeWritesEmulated(const NetworkPlan& plan, const platform::ProviderRules& rules,
                         const PlanSources& sources) {
  bool emulated = false;
  int probed = sources.probeBool(plan.choice.domains.front().get(), platform::opt::kLevelEndpoint,
                                 rules.writesEmulatedOption, &emulated);
  if (probed != 0) emulated = true;  // an older provider that cannot say does not write
  NNF_INFO(abi::kLogSubsysInit, "provider %s: RMA writes %s", plan.choice.provider.c_str(),
           probed != 0
               ? ("of unknown kind (" + fabric::errorText(probed) + "): taken as emulated").c_str()
               : (emulated ? "emulated in software" : "done by the device"));
  return emulated;
}

}  // namespace

void PlanError::warn() const {
  // Here, beside the statements that compose each message (docs/troubleshooting.md lists them).
  NNF_WARN("%s", what());
}

NetworkPlan planNetwork(const config::Config& config, const PlanSources& sources) {
  NetworkPlan plan;
  bool wantHmem =
      sources.cudaUsable(config) && memory::gdrModeFromConfig(config) != memory::GdrMode::kOff;
  const std::string& protocolSetting = config.string(config::Param::kProtocol);
  try {
    plan.choice = fabric::selectProvider(config.string(config::Param::kProvider), wantHmem,
                                         platform::wantsRma(protocolSetting), sources.query);
  } catch (const std::exception& error) {
    throw PlanError(abi::kSystemError, std::string("no usable network: ") + error.what() +
                                           "; NCCL will fall back to its own transports");
  }
  const std::string& provider = plan.choice.provider;
  NNF_INFO(abi::kLogSubsysInit, "provider %s: %s rules", provider.c_str(),
           platform::familyName(platform::familyOf(provider)));
  const platform::ProviderRules& rules = platform::rulesFor(platform::familyOf(provider));
  if (plan.choice.rma && rules.writesEmulatedOption != 0 && !plan.choice.domains.empty()) {
    plan.writesEmulated = probeWritesEmulated(plan, rules, sources);
  }
  plan.protocol =
      platform::decideProtocol({protocolSetting, provider, plan.choice.rma, plan.writesEmulated});
  if (plan.protocol.refused) {
    throw PlanError(abi::kInvalidUsage,
                    "NCCL_FABRIC_PROTOCOL=rdma, but provider " + provider +
                        " offers no RMA writes with immediate data on every NIC; use sendrecv "
                        "(or auto)");
  }
  NNF_INFO(abi::kLogSubsysInit, "protocol %s: %s", plan.protocolName(),
           plan.protocol.reason.c_str());
  // The sendrecv protocol moves data on each device's leader NIC only; rdma stripes over up to
  // kMaxRails of them (what a memory registration holds keys for).
  plan.carryingRails = plan.protocol.rdma ? memory::kMaxRails : 1;
  try {
    plan.devices = planDevices(plan.choice, config, plan.carryingRails, sources.topology);
  } catch (const config::ConfigError& error) {
    throw PlanError(abi::kInvalidUsage, std::string("invalid configuration: ") + error.what());
  }
  for (DeviceSpec& spec : plan.devices.specs) spec.rdma = plan.protocol.rdma;
  return plan;
}

}  // namespace nnf::core
