#include "platform/protocol_choice.h"

namespace nnf::platform {

bool wantsRma(const std::string& setting) {
  return setting != "sendrecv";
}

ProtocolDecision decideProtocol(const ProtocolInputs& inputs) {
  ProtocolDecision decision;
  const std::string setting = "NCCL_FABRIC_PROTOCOL=" + inputs.setting;
  if (inputs.setting == "sendrecv") {
    decision.reason = setting;
    return decision;
  }
  if (!inputs.offersRma) {
    if (inputs.setting == "rdma") {
      decision.refused = true;
    } else {
      decision.reason = setting + ", and provider " + inputs.provider +
                        " offers no RMA writes with remote CQ data on every NIC";
    }
    return decision;
  }
  if (inputs.writesEmulated && inputs.setting != "rdma") {
    // Emulated writes cost the receiver's CPU a copy each, and take a handshake per message.
    decision.reason = setting + ", and provider " + inputs.provider +
                      " emulates RMA writes in software here (no device RDMA write)";
    return decision;
  }
  decision.rdma = true;
  decision.reason = setting + ", and provider " + inputs.provider +
                    " offers RMA writes with remote CQ data on every NIC" +
                    (inputs.writesEmulated ? " (emulated in software here)" : "");
  return decision;
}

}  // namespace nnf::platform
