// fi_info translation between "efa" (what callers see) and the base provider underneath.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "efa_rules.h"
#include "fabric/legacy_mr_bits.h"  // FI_MR_BASIC by value (deprecated in libfabric 2.x)

namespace efa_rules {
namespace {

// EFA RDM's mr_mode core, always required.
constexpr uint64_t kRequiredMrMode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
// Capabilities we pass on from the base (EFA RDM has them all).
constexpr uint64_t kKeptCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
                               FI_REMOTE_WRITE | FI_SEND | FI_RECV | FI_SOURCE | FI_LOCAL_COMM |
                               FI_REMOTE_COMM;
// EFA's inject limit is a 4 KiB bounce buffer minus its packet header; 64 bytes stands for it.
constexpr size_t kInjectLimit = 4096 - 64;

// libfabric's internal FI_TAG_GENERIC (ofi.h), which efa reports: all 64 tag bits are free.
constexpr uint64_t kTagGeneric = 0xAAAAAAAAAAAAAAAAULL;

thread_local bool t_inside = false;  // never answer our own nested fi_getinfo

void replace(char*& field, const char* value) {
  std::free(field);
  field = value != nullptr ? strdup(value) : nullptr;
}

bool baseMatches(const char* provName, const std::string& base) {
  if (provName == nullptr) return false;
  std::string name = provName;
  return name == base || name.rfind(base + ";", 0) == 0;
}

// "efa-<base domain>-rdm[-<nic>]" split into the base domain and the NIC; false when not ours.
bool splitDomainName(const std::string& name, std::string* base, int* nic) {
  if (name.rfind("efa-", 0) != 0) return false;
  std::string rest = name.substr(4);
  *nic = 0;
  size_t dash = rest.rfind('-');
  if (dash != std::string::npos && rest.size() - dash == 2 && rest[dash + 1] >= '1' &&
      rest[dash + 1] < '0' + kMaxNics && dash >= 4 && rest.compare(dash - 4, 4, "-rdm") == 0) {
    *nic = rest[dash + 1] - '0';
    rest.resize(dash);
  }
  if (rest.size() < 5 || rest.compare(rest.size() - 4, 4, "-rdm") != 0) return false;
  *base = rest.substr(0, rest.size() - 4);
  return true;
}

// Our domain name back to the base's; anything else is not ours.
const char* baseDomainName(const char* ours, std::string* storage) {
  int nic = 0;
  if (ours == nullptr || !splitDomainName(ours, storage, &nic)) return nullptr;
  return storage->c_str();
}

}  // namespace

std::string efaDomainName(const std::string& baseDomain, int nic) {
  std::string name = "efa-" + baseDomain + "-rdm";
  return nic == 0 ? name : name + "-" + std::to_string(nic);
}

int nicOf(const char* ourDomainName) {
  std::string base;
  int nic = 0;
  if (ourDomainName == nullptr || !splitDomainName(ourDomainName, &base, &nic)) return -1;
  return nic;
}

uint64_t tagMaskOf(uint64_t memTagFormat) {
  return memTagFormat == kTagGeneric ? ~0ULL : memTagFormat;
}

fi_info* toBaseHints(const fi_info* hints, const Config& config) {
  fi_info* base = hints != nullptr ? fi_dupinfo(hints) : fi_allocinfo();
  if (base == nullptr) return nullptr;
  // Real GPU memory (NNF_EFA_RULES_HMEM_BASE=1) must reach a base that takes it; otherwise the
  // base sees host memory only (the fake driver's "device memory" is host memory).
  const bool hmemBase = config.hmemBase && (base->caps & FI_HMEM) != 0;
  if (!hmemBase) base->caps &= ~FI_HMEM;
  base->ep_attr->type = FI_EP_RDM;
  base->ep_attr->mem_tag_format = 0;
  base->ep_attr->protocol = FI_PROTO_UNSPEC;
  replace(base->fabric_attr->prov_name, config.base.c_str());
  replace(base->fabric_attr->name, nullptr);
  std::string domain;
  replace(base->domain_attr->name, baseDomainName(base->domain_attr->name, &domain));
  uint64_t mrMode = hints != nullptr ? static_cast<uint64_t>(hints->domain_attr->mr_mode) : 0;
  base->domain_attr->mr_mode =
      static_cast<int>(kRequiredMrMode | (mrMode & FI_MR_LOCAL) | (hmemBase ? FI_MR_HMEM : 0));
  base->domain_attr->cq_data_size = 0;
  base->tx_attr->inject_size = 0;
  if (!hmemBase) {
    base->tx_attr->caps &= ~FI_HMEM;
    base->rx_attr->caps &= ~FI_HMEM;
  }
  return base;
}

fi_info* toEfaInfo(const fi_info* base, const fi_info* hints, const Config& config, int nic) {
  fi_info* info = fi_dupinfo(base);
  if (info == nullptr) return nullptr;
  bool hmem = config.hmem && (hints == nullptr || hints->caps == 0 || (hints->caps & FI_HMEM));
  uint64_t hmemCap = hmem ? FI_HMEM : 0;
  info->caps = (base->caps & kKeptCaps) | hmemCap;
  info->tx_attr->caps = (base->tx_attr->caps & kKeptCaps) | hmemCap;
  info->rx_attr->caps = (base->rx_attr->caps & kKeptCaps) | hmemCap;
  uint64_t contexts =
      hints != nullptr ? hints->mode & (FI_CONTEXT | FI_CONTEXT2) : (FI_CONTEXT | FI_CONTEXT2);
  info->mode = base->mode | contexts;

  uint64_t hintMr = hints != nullptr ? static_cast<uint64_t>(hints->domain_attr->mr_mode)
                                     : (FI_MR_LOCAL | FI_MR_HMEM);
  uint64_t mrMode = kRequiredMrMode | (hintMr & FI_MR_LOCAL);
  if (hmem && (hintMr & FI_MR_HMEM)) mrMode |= FI_MR_HMEM;
  info->domain_attr->mr_mode = static_cast<int>(mrMode);
  info->domain_attr->cq_data_size = kEfaCqDataSize;  // EFA's, with or without FI_RMA
  info->ep_attr->mem_tag_format = config.tagBits > 0 ? (1ULL << config.tagBits) - 1 : kTagGeneric;
  info->ep_attr->protocol = FI_PROTO_EFA;
  info->tx_attr->inject_size = std::min(base->tx_attr->inject_size, kInjectLimit);

  replace(info->domain_attr->name, efaDomainName(base->domain_attr->name, nic).c_str());
  replace(info->fabric_attr->name, "efa");
  // The core fills prov_name with ours; a name left here would become "tcp;efa".
  replace(info->fabric_attr->prov_name, nullptr);
  return info;
}

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info) {
  *info = nullptr;
  if (t_inside) return -FI_ENODATA;
  Config config = loadConfig();
  if (hints != nullptr) {
    if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM)
      return -FI_ENODATA;
    if ((hints->caps & FI_HMEM) && !config.hmem) return -FI_ENODATA;
    // As the core's check for real providers: an unspecified mr_mode (0) or FI_MR_BASIC takes
    // whatever the provider needs; otherwise every required bit must be offered.
    uint64_t mrMode = hints->domain_attr ? static_cast<uint64_t>(hints->domain_attr->mr_mode) : 0;
    if (mrMode != 0 && mrMode != nnf::fabric::kLegacyMrBasic &&
        (mrMode & kRequiredMrMode) != kRequiredMrMode)
      return -FI_ENODATA;
    if (hints->fabric_attr && hints->fabric_attr->name &&
        std::strcmp(hints->fabric_attr->name, "efa") != 0)
      return -FI_ENODATA;
  }
  fi_info* baseHints = toBaseHints(hints, config);
  if (baseHints == nullptr) return -FI_ENOMEM;
  fi_info* baseList = nullptr;
  t_inside = true;
  int ret = fi_getinfo(version, node, service, flags, baseHints, &baseList);
  t_inside = false;
  fi_freeinfo(baseHints);
  if (ret != 0) return ret;

  // NIC by NIC: every base entry once per NIC, so that NIC 0's entries come first as before.
  fi_info* tail = nullptr;
  for (int nic = 0; nic < config.nics; ++nic) {
    for (fi_info* entry = baseList; entry != nullptr; entry = entry->next) {
      if (entry->ep_attr->type != FI_EP_RDM ||
          !baseMatches(entry->fabric_attr->prov_name, config.base))
        continue;
      // A hint naming one of our domains: only that NIC's entries.
      int wanted =
          hints != nullptr && hints->domain_attr != nullptr ? nicOf(hints->domain_attr->name) : -1;
      if (wanted >= 0 && wanted != nic) continue;
      fi_info* ours = toEfaInfo(entry, hints, config, nic);
      if (ours == nullptr) continue;
      if (tail == nullptr)
        *info = ours;
      else
        tail->next = ours;
      tail = ours;
    }
  }
  fi_freeinfo(baseList);
  return *info != nullptr ? 0 : -FI_ENODATA;
}

fi_info* baseInfoFor(const fi_info* ours, const Config& config) {
  fi_info* hints = toBaseHints(ours, config);
  if (hints == nullptr) return nullptr;
  std::string wanted = hints->domain_attr->name != nullptr ? hints->domain_attr->name : "";
  fi_info* list = nullptr;
  t_inside = true;
  int ret =
      fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, &list);
  t_inside = false;
  fi_freeinfo(hints);
  if (ret != 0) return nullptr;
  fi_info* found = nullptr;
  for (fi_info* entry = list; entry != nullptr && found == nullptr; entry = entry->next) {
    if (!baseMatches(entry->fabric_attr->prov_name, config.base)) continue;
    if (!wanted.empty() && wanted != entry->domain_attr->name) continue;
    found = fi_dupinfo(entry);
  }
  fi_freeinfo(list);
  return found;
}

}  // namespace efa_rules
