#include "core/fabric_rails.h"

#include <stdexcept>

#include "core/device.h"
#include "core/tags.h"
#include "log/log.h"
#include "platform/endpoint_options.h"
#include "platform/provider_rules.h"

namespace nnf::core {

FabricRails::FabricRails(int index, const DeviceSpec& spec, const config::Config& config) {
  const fi_info* leader = spec.rails.front();
  std::string why;
  if (leader->ep_attr != nullptr &&
      !platform::tagFormatFits(leader->ep_attr->mem_tag_format, tags::kBitsUsed, &why)) {
    throw std::runtime_error(why + "; choose another provider with NCCL_FABRIC_PROVIDER");
  }
  openRails(spec);
  for (const auto& rail : rails_) {
    registrars_.push_back(std::make_unique<memory::FabricRegistrar>(rail->domain(), rail->info(),
                                                                    lock(), rail->endpoint()));
  }
  if (rails_.size() > 1) {
    std::vector<memory::FabricRegistrar*> set;
    for (const auto& registrar : registrars_) set.push_back(registrar.get());
    railSet_ = std::make_unique<memory::RailSetRegistrar>(std::move(set));
  }
  FabricEngine::Settings settings;
  settings.deviceIndex = index;
  settings.deviceName = spec.properties.name;
  settings.railNames = spec.railNames;
  settings.cqReadCount = static_cast<size_t>(config.integer(config::Param::kCqReadCount));
  settings.injectLimit = config.flag(config::Param::kInject) ? rails_.front()->injectSize() : 0;
  settings.deliversInOrder = deliversInOrder_;
  std::vector<fabric::Rail*> rails;
  for (const auto& rail : rails_) rails.push_back(rail.get());
  engine_ = std::make_unique<FabricEngine>(std::move(rails), std::move(settings));
}

FabricRails::~FabricRails() {
  close();
}

void FabricRails::close() {
  // Registrations go before their domains.
  railSet_.reset();
  registrars_.clear();
  rails_.clear();
}

void FabricRails::openRails(const DeviceSpec& spec) {
  const fi_info* leader = spec.rails.front();
  const platform::ProviderRules& rules =
      platform::rulesFor(platform::familyOf(leader->fabric_attr->prov_name));
  const std::string& name = spec.properties.name;
  platform::EndpointNeeds needs;
  needs.hmem = (leader->caps & FI_HMEM) != 0;
  needs.readFlush = spec.rmaRead;
  // NCCL's LL128 lines travel as the protocol's data: RMA writes under rdma (eager messages
  // included), tagged messages under sendrecv. Control messages carry none, so each endpoint asks
  // only for the ordering of its protocol's data (libfabric 2.4 and later refuse EFA's
  // message-ordering option outright: asking for it under rdma cost LL128 for nothing).
  needs.rmaWrite = spec.rdma;
  needs.sendRecv = !spec.rdma;
  std::vector<platform::EndpointOption> options = platform::optionsFor(rules, needs);
  std::vector<fabric::EndpointSetting> settings;
  for (const platform::EndpointOption& option : options) {
    settings.push_back({option.level, option.optname, option.value, 0});
  }
  rails_.push_back(std::make_unique<fabric::Rail>(leader, 0, &settings, rules.bindEventQueue));
  // The other rails carry rdma writes only; an option they refuse was refused by the leader
  // too or matters for messages alone, so their answers are not acted on.
  size_t wanted = spec.carryingRails;
  for (size_t r = 1; r < wanted; ++r) {
    std::vector<fabric::EndpointSetting> railSettings = settings;
    rails_.push_back(
        std::make_unique<fabric::Rail>(spec.rails[r], 0, &railSettings, rules.bindEventQueue));
  }
  if (spec.rdma && spec.rails.size() > wanted) {
    NNF_INFO(abi::kLogSubsysInit, "%s: data moves on the first %zu of its %zu NICs", name.c_str(),
             wanted, spec.rails.size());
  }

  std::vector<platform::OptionResult> results;
  for (size_t i = 0; i < options.size(); ++i) results.push_back({options[i], settings[i].result});
  platform::logOptionResults(name.c_str(), results);
  platform::OptionVerdict verdict = platform::verdictOf(results);
  verdict_.hostMemoryOnly = verdict.hostMemoryOnly;
  verdict_.noReadFlush = verdict.noReadFlush;
  verdict_.ll128Ok = !rules.unorderedDelivery || !verdict.noLL128;
  deliversInOrder_ = !rules.unorderedDelivery;
}

bool FabricRails::takesBackPostedWritesSafely() const {
  return platform::postedWritesTakenBackSafely(
      platform::familyOf(rails_.front()->info()->fabric_attr->prov_name), fi_version());
}

}  // namespace nnf::core
