// What the plugin decides at init before it opens anything: the provider and its NICs, the data
// protocol, and the devices with the NICs that carry their data. Plugin::init acts on it and
// fabric-net-info prints it, so the tool shows the plugin's decisions rather than its own
// (tests/tools/info_plan_test.cc holds the two together on every hwloc fixture).
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>

#include "config/config.h"
#include "core/device_plan.h"
#include "fabric/provider.h"
#include "nccl_net/types.h"
#include "platform/protocol_choice.h"
#include "topology/hwloc_topology.h"

namespace nnf::core {

// Where the plan's facts come from. The defaults are the live machine; offline plans (an hwloc
// dump) and tests replace them, and the same decisions run on what they answer.
struct PlanSources {
  fabric::InfoQuery query = fabric::queryLibfabric;
  // Opens an endpoint on `nic` and reads a bool endpoint option: 0 or a negative fi_errno
  // (fabric::probeEndpointBool). Asked whether the provider emulates RMA writes.
  std::function<int(const fi_info* nic, int level, int name, bool* value)> probeBool;
  std::function<topology::Topology()> topology = topology::Topology::fromSystem;
  // Whether CUDA is usable under this configuration (memory::CudaDriver::fromConfig).
  std::function<bool(const config::Config&)> cudaUsable;

  PlanSources();
};

struct NetworkPlan {
  fabric::ProviderChoice choice;
  // The provider does RMA writes in software (its rules' option said so, or could not say).
  bool writesEmulated = false;
  platform::ProtocolDecision protocol;
  // The most NICs of one device that move data: the leader alone under sendrecv, up to
  // memory::kMaxRails under rdma. Each device's spec has its own count (DeviceSpec).
  size_t carryingRails = 1;
  // Specs hold fi_info pointers into `choice`: they live as long as this plan.
  DevicePlan devices;

  const char* protocolName() const { return protocol.rdma ? "rdma" : "sendrecv"; }
};

// A plan that cannot be made: what init returns, and the one line it WARNs.
class PlanError : public std::runtime_error {
 public:
  PlanError(abi::Result result, const std::string& message)
      : std::runtime_error(message), result_(result) {}
  abi::Result result() const { return result_; }
  // The WARN init prints (the tool prints the same text as its last line instead).
  void warn() const;

 private:
  abi::Result result_;
};

// Selects the provider (NCCL_FABRIC_PROVIDER, efa, else the first one not skipped by default),
// asks it for FI_HMEM where CUDA is usable and GPUDirect is not off, decides the protocol
// (NCCL_FABRIC_PROTOCOL against what every NIC offers) and plans the devices, logging each
// decision at INFO. Throws PlanError: ncclSystemError when no provider is usable,
// ncclInvalidUsage when rdma is asked for and cannot run or NCCL_FABRIC_RAILS is malformed.
NetworkPlan planNetwork(const config::Config& config, const PlanSources& sources);

}  // namespace nnf::core
