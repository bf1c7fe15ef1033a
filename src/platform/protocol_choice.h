// Which data protocol a plugin runs: NCCL_FABRIC_PROTOCOL against what the chosen provider offers
// on every NIC. Pure logic, so that every combination is tested without a provider.
#pragma once

#include <string>

namespace nnf::platform {

struct ProtocolInputs {
  std::string setting;     // NCCL_FABRIC_PROTOCOL: auto, rdma or sendrecv
  std::string provider;    // the provider chosen, for the reason
  bool offersRma = false;  // RMA writes with remote CQ data on every NIC (ProviderChoice::rma)
  // The provider does those writes in software (ProviderRules::writesEmulatedOption said so, or
  // could not say): each becomes a send and a receive inside the provider.
  bool writesEmulated = false;
};

struct ProtocolDecision {
  bool rdma = false;
  bool refused = false;  // rdma was asked for and cannot run: init fails (ncclInvalidUsage)
  std::string reason;    // one line for INFO (empty when refused: the caller WARNs)
};

// Whether to ask the provider for RMA writes at all: everything but sendrecv does.
bool wantsRma(const std::string& setting);
ProtocolDecision decideProtocol(const ProtocolInputs& inputs);

}  // namespace nnf::platform
