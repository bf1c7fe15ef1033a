// Environment of the EFA-rules provider (listed in provider.cc).
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "efa_rules.h"

namespace efa_rules {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

Config loadConfig() {
  Config config;
  if (const char* v = env("NNF_EFA_RULES_BASE")) config.base = v;
  if (const char* v = env("NNF_EFA_RULES_HMEM")) config.hmem = std::strcmp(v, "0") != 0;
  if (const char* v = env("NNF_EFA_RULES_HMEM_BASE")) config.hmemBase = std::strcmp(v, "1") == 0;
  if (const char* v = env("NNF_EFA_RULES_REORDER")) config.reorder = std::strcmp(v, "0") != 0;
  if (const char* v = env("NNF_EFA_RULES_SEED")) config.seed = std::strtoull(v, nullptr, 0);
  if (const char* v = env("NNF_EFA_RULES_TAG_BITS")) config.tagBits = std::atoi(v);
  if (config.tagBits < 0 || config.tagBits >= 64) config.tagBits = 0;
  if (const char* v = env("NNF_EFA_RULES_DMABUF")) config.dmabuf = std::strcmp(v, "1") == 0;
  if (const char* v = env("NNF_EFA_RULES_NICS")) config.nics = std::atoi(v);
  if (const char* v = env("NNF_EFA_RULES_FAIL_NIC")) config.failNic = std::atoi(v);
  if (const char* v = env("NNF_EFA_RULES_HOLD_NIC")) {
    const char* colon = std::strchr(v, ':');
    config.holdNic = std::atoi(v);
    config.holdMs = colon != nullptr ? std::atoi(colon + 1) : 0;
  }
  if (const char* v = env("NNF_EFA_RULES_EMULATED_WRITE")) {
    config.emulatedWrite = std::strcmp(v, "1") == 0;
  }
  if (config.nics < 1 || config.nics > kMaxNics) config.nics = 1;
  // libfabric 2.4 and later refuse EFA's message-ordering option on every device.
  if (const char* v = env("NNF_EFA_RULES_SENDRECV_ORDER"); v == nullptr || std::strcmp(v, "1") != 0) {
    config.refuse.insert("sendrecv_in_order_aligned_128_bytes");
  }
  if (const char* v = env("NNF_EFA_RULES_REFUSE")) {
    std::stringstream list(v);
    std::string item;
    while (std::getline(list, item, ',')) {
      if (!item.empty()) config.refuse.insert(item);
    }
  }
  return config;
}

bool refused(const char* optionName) {
  return loadConfig().refuse.count(optionName) != 0;
}

}  // namespace efa_rules
