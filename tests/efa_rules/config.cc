// Environment of the EFA-rules provider (listed in provider.cc).
#include <algorithm>
#include <cstdio>
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

// "all" and "nic:N" items, comma-separated; an item of neither form is said on stderr (a test
// that means to emulate and does not would pass for the wrong reason).
EmulatedPeers parseEmulatedPeers(const char* value) {
  EmulatedPeers peers;
  std::stringstream list(value);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item == "all") {
      peers.all = true;
    } else if (item.rfind("nic:", 0) == 0 && item.size() > 4 &&
               std::strspn(item.c_str() + 4, "0123456789") == item.size() - 4 &&
               std::atoi(item.c_str() + 4) < kMaxNics) {
      peers.nics |= 1u << std::atoi(item.c_str() + 4);
    } else if (!item.empty()) {
      std::fprintf(stderr, "efa-rules: NNF_EFA_RULES_EMULATE_PEER: ignoring \"%s\"\n",
                   item.c_str());
    }
  }
  return peers;
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
    // "n:ms" or "n,m,...:ms".
    for (const char* nic = v; nic != nullptr && nic < colon; nic = std::strchr(nic, ',')) {
      if (*nic == ',') ++nic;
      int n = std::atoi(nic);
      if (n >= 0 && n < kMaxNics) config.holdNics |= 1u << n;
    }
    config.holdMs = colon != nullptr ? std::atoi(colon + 1) : 0;
  }
  if (const char* v = env("NNF_EFA_RULES_HOLD_READS")) config.holdReadsMs = std::atoi(v);
  if (const char* v = env("NNF_EFA_RULES_EMULATED_WRITE")) {
    config.emulatedWrite = std::strcmp(v, "1") == 0;
  }
  if (const char* v = env("NNF_EFA_RULES_EMULATE_PEER")) config.emulatePeer = parseEmulatedPeers(v);
  if (const char* v = env("NNF_EFA_RULES_REMOTE_WRITE_ERRORS")) {
    config.remoteWriteErrors = std::max(std::atoi(v), 0);
  }
  if (const char* v = env("NNF_EFA_RULES_INTERLEAVE_ERRORS")) {
    config.interleaveErrors = std::strcmp(v, "0") != 0;
  }
  if (const char* v = env("NNF_EFA_RULES_HANDSHAKE_EAGAIN")) {
    config.handshakeEagain = std::max(std::atoi(v), 0);
  }
  if (config.nics < 1 || config.nics > kMaxNics) config.nics = 1;
  // libfabric 2.4 and later refuse EFA's message-ordering option on every device.
  if (const char* v = env("NNF_EFA_RULES_SENDRECV_ORDER");
      v == nullptr || std::strcmp(v, "1") != 0) {
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
