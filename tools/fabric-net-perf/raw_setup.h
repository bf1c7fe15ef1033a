// What fabric-net-perf's two raw engines (raw_engine.h, rma_raw_engine.h) set up alike: the
// fi_getinfo hints, the error text, and the exchange of endpoint addresses between the ranks.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "raw_endpoint.h"

namespace nnf::perf {

// The registration modes a simple application can honour: it registers what it sends and passes
// local descriptors.
constexpr uint64_t kRawMrModes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

// fi_getinfo for an FI_EP_RDM endpoint with `caps` and `mrModes`, FI_CONTEXT|FI_CONTEXT2 and
// FI_THREAD_DOMAIN, of `provider` (empty: FI_PROVIDER or libfabric decides). 0 with *info the
// list, or the negative error with *info nullptr.
int getRawInfo(const std::string& provider, uint64_t caps, uint64_t mrModes, fi_info** info);

// "raw libfabric: <what>: <fi_strerror> (<rc>)", the raw engines' error text.
std::string rawError(const std::string& what, int rc);

// Sends this rank's endpoint address to every rank and inserts theirs: (*peers)[rank] is rank's
// address, FI_ADDR_UNSPEC for this rank. False with *error set.
bool exchangeRawAddresses(Bootstrap& boot, const tools::RawEndpoint& endpoint,
                          std::vector<fi_addr_t>* peers, std::string* error);

}  // namespace nnf::perf
