#include "raw_setup.h"

#include <rdma/fi_errno.h>

#include <cstring>

namespace nnf::perf {

int getRawInfo(const std::string& provider, uint64_t caps, uint64_t mrModes, fi_info** info) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = caps;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = static_cast<int>(mrModes);
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  if (!provider.empty()) hints->fabric_attr->prov_name = strdup(provider.c_str());
  int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, info);
  fi_freeinfo(hints);
  if (rc != 0) *info = nullptr;
  return rc;
}

std::string rawError(const std::string& what, int rc) {
  return "raw libfabric: " + what + ": " + fi_strerror(-rc) + " (" + std::to_string(rc) + ")";
}

bool exchangeRawAddresses(Bootstrap& boot, const tools::RawEndpoint& endpoint,
                          std::vector<fi_addr_t>* peers, std::string* error) {
  std::string name;
  int rc = endpoint.name(&name);
  if (rc != 0) {
    *error = rawError("fi_getname", rc);
    return false;
  }
  std::vector<std::string> mine(boot.size(), name), theirs;
  if (!boot.exchange(mine, &theirs)) {
    *error = boot.error();
    return false;
  }
  peers->assign(boot.size(), FI_ADDR_UNSPEC);
  for (int peer = 0; peer < boot.size(); ++peer) {
    if (peer == boot.rank()) continue;
    if ((rc = endpoint.insert(theirs[peer], &(*peers)[peer])) != 0) {
      *error = rawError("fi_av_insert", rc);
      return false;
    }
  }
  return true;
}

}  // namespace nnf::perf
