// How NCCL reads NCCL_PROTO, for the one question the plugin asks of it. Header-only and
// dependency-free: the EFA-rules test provider asks it too.
#pragma once

#include <strings.h>

#include <cstring>
#include <sstream>
#include <string>

namespace nnf::platform {

// Whether NCCL would run LL128 for some function under this NCCL_PROTO value. NCCL reads it as
// sections split by ';', each an optional "<function>:" prefix and a list split by ','; a list
// starting with '^' enables everything it does not name (LL128 forced on), else exactly what it
// names, case-insensitively (src/graph/tuning.cc, parseList).
inline bool protoMayEnableLL128(const char* proto) {
  auto trimmed = [](const std::string& text) {
    size_t first = text.find_first_not_of(" \t");
    if (first == std::string::npos) return std::string();
    return text.substr(first, text.find_last_not_of(" \t") - first + 1);
  };
  std::stringstream sections(proto);
  for (std::string section; std::getline(sections, section, ';');) {
    size_t colon = section.find(':');
    std::string list = trimmed(colon == std::string::npos ? section : section.substr(colon + 1));
    if (list.empty()) continue;
    bool exclude = list[0] == '^';
    bool named = false;
    std::stringstream items(exclude ? list.substr(1) : list);
    for (std::string item; std::getline(items, item, ',');) {
      named = named || strcasecmp(trimmed(item).c_str(), "LL128") == 0;
    }
    if (exclude != named) return true;
  }
  return false;
}

}  // namespace nnf::platform
