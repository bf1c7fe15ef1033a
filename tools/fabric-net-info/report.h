// Printing a device plan, shared by the offline (--topology) and live modes.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "topology/hwloc_topology.h"
#include "topology/planner.h"

namespace nnf::tools {

// {"devices":[{"index":0,"gpus":["0000:53:00.0"],"nics":["0000:4f:00.0",...]},...]}, one line.
// NICs without PCI data appear by name.
std::string planJson(const topology::Plan& plan, const std::vector<topology::Nic>& nics);

// A readable table: one row per device with its rails, speed, NUMA node and GPUs, then the
// leader's sysfs path.
void printPlanTable(FILE* out, const topology::Plan& plan, const std::vector<topology::Nic>& nics,
                    const topology::Topology* topo);

}  // namespace nnf::tools
