// Printing the plugin's plan (core::NetworkPlan) as the tool shows it: every field comes from
// the plan, none is worked out here.
#pragma once

#include <cstdio>
#include <string>

#include "core/network_plan.h"

namespace nnf::tools {

// One line of JSON:
// {"provider":"efa","protocol":"rdma","carryingRails":4,"devices":[{"index":0,
//  "name":"rdmap79s0-rdm","placement":"gpu","numa":0,"speedMbps":400000,"pciPath":"/sys/...",
//  "guid":"0x...","gpus":["0000:53:00.0"],"nics":["0000:4f:00.0",...],
//  "rails":["rdmap79s0-rdm",...],"carrying":["rdmap79s0-rdm",...]},...]}
// "nics" names each rail by PCI address (by name without one), "rails" by the name
// NCCL_FABRIC_RAILS matches; "carrying" is the rails that move data; "pciPath" is null where
// NCCL gets NULL.
std::string planJson(const core::NetworkPlan& plan);

// "protocol rdma: <reason>" and "hwloc: ..." lines, `indent` before each.
void printPlanSummary(FILE* out, const core::NetworkPlan& plan, const char* indent);

// A table, one row per device (name, placement, rails, carrying rails, speed, NUMA node, GPUs,
// the rails by name with '*' on those that carry data), then each device's pciPath and guid.
void printPlanTable(FILE* out, const core::NetworkPlan& plan);

}  // namespace nnf::tools
