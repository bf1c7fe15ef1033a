#include "fabric/provider.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include <cstring>
#include <set>
#include <stdexcept>

#include "log/log.h"

namespace nnf::fabric {
namespace {

// The API version we ask for: what our headers describe.
constexpr uint32_t kApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

// The chosen provider's domains, one fi_info each (the first entry per domain name wins).
std::vector<InfoPtr> domainsOf(const InfoPtr& all, const std::string& provider) {
  std::vector<InfoPtr> domains;
  std::set<std::string> seen;
  for (fi_info* info = all.get(); info != nullptr; info = info->next) {
    if (provider != info->fabric_attr->prov_name) continue;
    // Several entries can describe one domain (IPv4 and IPv6 fabrics of one interface).
    if (!seen.insert(info->domain_attr->name).second) continue;
    domains.emplace_back(fi_dupinfo(info));
    if (!domains.back()) throw std::runtime_error("fi_dupinfo failed");
  }
  return domains;
}

// The rdma protocol's capabilities: RMA writes into registered buffers of the peer.
constexpr uint64_t kRmaWriteCaps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
// Asked for beside them where the provider has them: the one-sided RMA layer's gets (src/rma).
constexpr uint64_t kRmaReadCaps = FI_RMA | FI_READ | FI_REMOTE_READ;

InfoPtr providerHints(const std::string& provider, uint64_t caps) {
  InfoPtr hints = makeHints();
  hints->caps |= caps;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

InfoPtr hmemHints(const std::string& provider, bool withRead, uint64_t rmaCaps) {
  InfoPtr hints = providerHints(provider, FI_HMEM | rmaCaps);
  if (withRead) hints->caps |= FI_RMA | FI_READ | FI_REMOTE_READ;
  hints->domain_attr->mr_mode |= FI_MR_HMEM;
  return hints;
}

// The provider's domains again, with `caps` added; empty when it cannot offer them everywhere.
std::vector<InfoPtr> domainsWith(const InfoQuery& query, const std::string& provider, uint64_t caps,
                                 size_t expected, bool hmem, bool withRead) {
  InfoPtr all;
  try {
    InfoPtr hints = hmem ? hmemHints(provider, withRead, caps & (kRmaWriteCaps | kRmaReadCaps))
                         : providerHints(provider, caps);
    all = query(*hints.get());
  } catch (const std::exception&) {
    return {};  // the provider cannot do it
  }
  std::vector<InfoPtr> domains = domainsOf(all, provider);
  if (domains.size() != expected) return {};
  // RMA writes carry the protocol's immediate data: at least 4 bytes of it.
  if ((caps & kRmaWriteCaps) != 0) {
    for (const InfoPtr& info : domains) {
      if (info->domain_attr->cq_data_size < 4) return {};
    }
  }
  return domains;
}

// `requested` when libfabric lists it, else efa, else the first provider not skipped by
// default. Throws when none fits.
std::string chooseProvider(const InfoPtr& all, const std::string& requested) {
  std::string chosen;
  for (fi_info* info = all.get(); info != nullptr && chosen.empty(); info = info->next) {
    std::string name = info->fabric_attr->prov_name;
    if (!requested.empty()) {
      if (providerMatches(requested, name)) chosen = name;
    } else if (name == "efa") {
      chosen = name;
    }
  }
  if (chosen.empty() && !requested.empty()) {
    throw std::runtime_error("NCCL_FABRIC_PROVIDER=" + requested +
                             " is not available with RDM endpoints and tagged messages");
  }
  for (fi_info* info = all.get(); info != nullptr && chosen.empty(); info = info->next) {
    std::string name = info->fabric_attr->prov_name;
    if (skippedByDefault(name)) {
      NNF_INFO(abi::kLogSubsysInit, "skipping provider %s (too slow; name it explicitly to use it)",
               name.c_str());
      continue;
    }
    chosen = name;
  }
  if (chosen.empty()) throw std::runtime_error("no usable libfabric provider found");
  return chosen;
}

// Asks the chosen provider for RMA writes (with reads first): the caps every domain offers,
// which `choice` then holds, or 0.
uint64_t askForRma(const InfoQuery& query, ProviderChoice& choice) {
  for (uint64_t caps : {kRmaWriteCaps | kRmaReadCaps, kRmaWriteCaps}) {
    std::vector<InfoPtr> domains =
        domainsWith(query, choice.provider, caps, choice.domains.size(), false, false);
    if (domains.empty()) continue;
    choice.domains = std::move(domains);
    choice.rma = true;
    return caps;
  }
  return 0;
}

#if NNF_HAVE_FI_HMEM
// Asks the chosen provider again for device memory, keeping `rmaCaps`; `choice` is left for
// host memory only when it cannot.
void askForHmem(const InfoQuery& query, uint64_t rmaCaps, ProviderChoice& choice) {
  // With the flush read first, then without it, then (a provider that reads no GPU memory)
  // without the RMA layer's gets: GPU memory matters more than gets.
  const uint64_t writesOnly = rmaCaps != 0 ? kRmaWriteCaps : 0;
  struct Attempt {
    bool withRead;
    uint64_t caps;
  };
  for (Attempt attempt :
       {Attempt{true, rmaCaps}, Attempt{false, rmaCaps}, Attempt{false, writesOnly}}) {
    bool withRead = attempt.withRead;
    std::vector<InfoPtr> domains =
        domainsWith(query, choice.provider, attempt.caps, choice.domains.size(), true, withRead);
    if (domains.empty()) continue;  // the provider cannot do it; host memory it is
    choice.domains = std::move(domains);
    choice.hmem = true;
    choice.rmaRead = withRead;
    break;
  }
}
#endif

}  // namespace

bool skippedByDefault(const std::string& provName) {
  return provName == "sockets";
}

InfoPtr queryLibfabric(const fi_info& hints) {
  InfoPtr result;
  int ret = fi_getinfo(kApiVersion, nullptr, nullptr, 0, &hints, result.out());
  if (ret == -FI_ENODATA) return InfoPtr();
  if (ret != 0) {
    throw std::runtime_error("fi_getinfo failed: " + errorText(ret));
  }
  return result;
}

InfoPtr makeHints() {
  InfoPtr hints(fi_allocinfo());
  if (!hints) throw std::runtime_error("fi_allocinfo failed");
  hints->caps = FI_TAGGED | FI_MSG | FI_SEND | FI_RECV;  // FI_MSG: the control channel
  // Our operation contexts start with fi_context2, so both context modes are satisfied.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  // Registration modes we implement: local descriptors, virtual addresses, provider keys.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // the device lock serialises all access
  hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
  hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  hints->tx_attr->msg_order = 0;
  hints->rx_attr->msg_order = 0;
  return hints;
}

bool providerMatches(const std::string& name, const std::string& provName) {
  if (name == provName) return true;
  // "tcp" designates "tcp;ofi_rxm": the core provider is the first component.
  return provName.compare(0, name.size(), name) == 0 && provName.size() > name.size() &&
         provName[name.size()] == ';';
}

ProviderChoice selectProvider(const std::string& requested, bool wantHmem, bool wantRma,
                              const InfoQuery& query) {
  InfoPtr all = query(*makeHints().get());
  if (!all) {
    throw std::runtime_error(
        "no libfabric provider offers reliable-datagram endpoints with tagged messages" +
        std::string(getenv("FI_PROVIDER")
                        ? " (FI_PROVIDER=" + std::string(getenv("FI_PROVIDER")) + ")"
                        : ""));
  }

  std::string chosen = chooseProvider(all, requested);
  ProviderChoice choice;
  choice.provider = chosen;
  for (fi_info* info = all.get(); info != nullptr; info = info->next) {
    if (chosen == info->fabric_attr->prov_name)
      choice.providerVersion = info->fabric_attr->prov_version;
  }
  choice.domains = domainsOf(all, chosen);
  uint64_t rmaCaps = 0;
  if (wantRma) rmaCaps = askForRma(query, choice);
#if NNF_HAVE_FI_HMEM
  if (wantHmem) askForHmem(query, rmaCaps, choice);
#endif
  return choice;
}

}  // namespace nnf::fabric
