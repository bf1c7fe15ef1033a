// Manual rail grouping: NCCL_FABRIC_RAILS="eth0,eth1;eth2" makes one device of eth0+eth1 (eth0
// leads) and one of eth2. Meant for NICs hwloc cannot place (virtual interfaces), but it
// overrides automatic placement for any NIC it names.
#pragma once

#include <string>
#include <vector>

namespace nnf::topology {

using RailGroups = std::vector<std::vector<std::string>>;

// Groups are separated by ';', names within a group by ','; blanks around names are ignored.
// "" (or only blanks) is no grouping. Throws config::ConfigError naming `envName` on an empty
// group or name, or a name listed twice.
RailGroups parseRailGroups(const std::string& text, const char* envName = "NCCL_FABRIC_RAILS");

// Back to the canonical text form ("a,b;c").
std::string formatRailGroups(const RailGroups& groups);

}  // namespace nnf::topology
