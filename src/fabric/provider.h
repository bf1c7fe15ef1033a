// Provider selection: which libfabric provider and which of its domains (NICs) the plugin uses.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "fabric/fid.h"

namespace nnf::fabric {

struct ProviderChoice {
  std::string provider;          // fi_info->fabric_attr->prov_name, e.g. "efa", "tcp;ofi_rxm"
  uint32_t providerVersion = 0;  // FI_VERSION encoded
  std::vector<InfoPtr> domains;  // one fi_info per NIC/domain, in libfabric's order
  bool hmem = false;             // the domains were opened for device memory (FI_HMEM)
  bool rmaRead = false;          // and offer RDMA reads (GPUDirect flush by read)
  bool rma = false;              // the domains offer RMA writes with remote CQ data (rdma protocol)
};

// The fi_getinfo hints for the sendrecv protocol: RDM endpoints with tagged messages.
InfoPtr makeHints();

// Where provider selection gets libfabric's answers: the entries that match `hints`, an empty
// InfoPtr when there are none (-FI_ENODATA); throws std::runtime_error on any other failure.
// The live one is queryLibfabric; offline plans and tests answer from lists built by hand, so
// that they run the plugin's own selection.
using InfoQuery = std::function<InfoPtr(const fi_info& hints)>;
InfoPtr queryLibfabric(const fi_info& hints);

// The sockets provider works but takes milliseconds per message: never picked unless named.
bool skippedByDefault(const std::string& provName);

// Picks the provider: `requested` (NCCL_FABRIC_PROVIDER) when non-empty, else efa when
// present, else the first usable one. FI_PROVIDER is honoured by libfabric itself. Throws
// std::runtime_error with a clear message when nothing usable exists.
// With `wantHmem` (CUDA usable, GPUDirect not forced off) the chosen provider is asked again
// for FI_HMEM (and RDMA reads for the flush); when it cannot, it is used for host memory only.
// With `wantRma` it is asked for RMA writes with immediate data (the rdma protocol): `rma` says
// whether every domain offers them.
ProviderChoice selectProvider(const std::string& requested, bool wantHmem = false,
                              bool wantRma = false, const InfoQuery& query = queryLibfabric);

// True when `name` (full "tcp;ofi_rxm" or its core "tcp") designates provider `provName`.
bool providerMatches(const std::string& name, const std::string& provName);

}  // namespace nnf::fabric
