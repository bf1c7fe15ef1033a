#include "topology/rails.h"

#include <set>

#include "config/config.h"

namespace nnf::topology {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

}  // namespace

RailGroups parseRailGroups(const std::string& text, const char* envName) {
  RailGroups groups;
  if (trim(text).empty()) return groups;
  auto fail = [&](const std::string& why) {
    throw config::ConfigError(std::string(envName) + "=\"" + text + "\" is malformed: " + why +
                              " (expected interface names, ',' within a rail group, ';' " +
                              "between groups, e.g. \"eth0,eth1;eth2\")");
  };
  std::set<std::string> seen;
  for (const std::string& rawGroup : split(text, ';')) {
    std::vector<std::string> group;
    if (trim(rawGroup).empty()) fail("empty group");
    for (const std::string& rawName : split(rawGroup, ',')) {
      std::string name = trim(rawName);
      if (name.empty()) fail("empty interface name");
      if (name.find_first_of(" \t") != std::string::npos) fail("blank inside \"" + name + "\"");
      if (!seen.insert(name).second) fail("\"" + name + "\" appears twice");
      group.push_back(name);
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

std::string formatRailGroups(const RailGroups& groups) {
  std::string out;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g > 0) out += ';';
    for (size_t n = 0; n < groups[g].size(); ++n) {
      if (n > 0) out += ',';
      out += groups[g][n];
    }
  }
  return out;
}

}  // namespace nnf::topology
