#include "config.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace nnf::softefa {
namespace {

// The EFA NICs of a p5.48xlarge in PCI order (four per GPU, each four under one PCIe switch), so
// that a topology dump of a p5 (HWLOC_XMLFILE) places the devices as it would place real ones.
constexpr const char* kP5Nics[] = {
    "0000:4f:00.0", "0000:50:00.0", "0000:51:00.0", "0000:52:00.0", "0000:60:00.0", "0000:61:00.0",
    "0000:62:00.0", "0000:63:00.0", "0000:71:00.0", "0000:72:00.0", "0000:73:00.0", "0000:74:00.0",
    "0000:82:00.0", "0000:83:00.0", "0000:84:00.0", "0000:85:00.0", "0000:93:00.0", "0000:94:00.0",
    "0000:95:00.0", "0000:96:00.0", "0000:a4:00.0", "0000:a5:00.0", "0000:a6:00.0", "0000:a7:00.0",
    "0000:b5:00.0", "0000:b6:00.0", "0000:b7:00.0", "0000:b8:00.0", "0000:c6:00.0", "0000:c7:00.0",
    "0000:c8:00.0", "0000:c9:00.0"};

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

bool flag(const char* name, bool fallback) {
  const char* value = env(name);
  if (value == nullptr) return fallback;
  return std::strcmp(value, "0") != 0 && std::strcmp(value, "false") != 0 &&
         std::strcmp(value, "no") != 0 && std::strcmp(value, "off") != 0;
}

uint64_t number(const char* name, uint64_t fallback) {
  const char* value = env(name);
  if (value == nullptr) return fallback;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(value, &end, 0);
  if (end == value || *end != '\0') {
    std::fprintf(stderr, "soft-efa: ignoring %s=%s (not a number)\n", name, value);
    return fallback;
  }
  return parsed;
}

// "n:K[:K2]" with n a device of this process's list.
Config::LinkSchedule schedule(const char* name) {
  Config::LinkSchedule out;
  const char* value = env(name);
  if (value == nullptr) return out;
  unsigned long long parts[3] = {0, 0, 0};
  int count = 0;
  const char* p = value;
  bool ok = true;
  while (ok && count < 3) {
    char* end = nullptr;
    ok = *p >= '0' && *p <= '9';
    parts[count++] = std::strtoull(p, &end, 10);
    p = end;
    if (*p == '\0') break;
    ok = ok && *p == ':';
    ++p;
  }
  if (!ok || *p != '\0' || count < 2 || parts[0] >= kMaxDevices) {
    std::fprintf(stderr, "soft-efa: ignoring %s=%s (expected n:K[:K2])\n", name, value);
    return out;
  }
  out.nic = static_cast<int>(parts[0]);
  out.after = parts[1];
  out.restoreAfter = parts[2];
  return out;
}

Config load() {
  Config cfg;
  uint64_t nics = number("NNF_SOFT_EFA_NICS", 1);
  if (nics > kMaxDevices) nics = kMaxDevices;
  if (const char* list = env("NNF_SOFT_EFA_PCI")) {
    std::stringstream in(list);
    for (std::string item; std::getline(in, item, ',');)
      if (!item.empty() && cfg.pci.size() < nics) cfg.pci.push_back(item);
  }
  for (size_t i = cfg.pci.size(); i < nics; ++i) cfg.pci.push_back(kP5Nics[i]);
  cfg.deviceId = static_cast<uint32_t>(number("NNF_SOFT_EFA_DEVICE_ID", cfg.deviceId));
  cfg.rdmaWrite = !flag("NNF_SOFT_EFA_NO_RDMA_WRITE", false);
  cfg.unsolicitedWrite = cfg.rdmaWrite && !flag("NNF_SOFT_EFA_NO_UNSOLICITED", false);
  cfg.maxRdmaSize = static_cast<uint32_t>(number("NNF_SOFT_EFA_MAX_RDMA_SIZE", cfg.maxRdmaSize));
  cfg.inOrder128 = flag("NNF_SOFT_EFA_IN_ORDER_128", true);
  cfg.reorder = flag("NNF_SOFT_EFA_REORDER", true);
  cfg.seed = number("NNF_SOFT_EFA_SEED", 1);
  cfg.rnrIntervalUs = static_cast<uint32_t>(number("NNF_SOFT_EFA_RNR_INTERVAL_US", 100));
  if (const char* fork = env("NNF_SOFT_EFA_FORK")) cfg.forkUnneeded = std::strcmp(fork, "disabled");
  cfg.ns = env("NNF_SOFT_EFA_NS") != nullptr ? env("NNF_SOFT_EFA_NS")
                                             : "u" + std::to_string(static_cast<int>(getuid()));
  for (char& c : cfg.ns)
    if (c == '/' || c == ' ') c = '_';  // it becomes part of file names
  cfg.sysfs = env("NNF_SOFT_EFA_SYSFS") != nullptr ? env("NNF_SOFT_EFA_SYSFS")
                                                   : "/tmp/nnf-soft-efa-" + cfg.ns;
  if (const char* stats = env("NNF_SOFT_EFA_STATS")) cfg.stats = stats;
  if (env("NNF_SOFT_EFA_FAIL_NIC") != nullptr)
    cfg.failNic = static_cast<int>(number("NNF_SOFT_EFA_FAIL_NIC", 0));
  cfg.failAfterOps = schedule("NNF_SOFT_EFA_FAIL_AFTER_OPS");
  cfg.failAfterMs = schedule("NNF_SOFT_EFA_FAIL_AFTER_MS");
  if (const char* file = env("NNF_SOFT_EFA_FAIL_FILE")) cfg.failFile = file;
  if (env("NNF_SOFT_EFA_SILENT_GIVE_UP_MS") != nullptr)
    cfg.silentGiveUpMs = number("NNF_SOFT_EFA_SILENT_GIVE_UP_MS", 1000);
  return cfg;
}

}  // namespace

const Config& config() {
  // Never destroyed: the device's thread may still read it while the process exits.
  static const Config* cfg = new Config(load());
  return *cfg;
}

}  // namespace nnf::softefa
