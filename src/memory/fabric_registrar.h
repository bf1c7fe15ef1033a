// Registrar over a libfabric domain, honouring the provider's mr_mode.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "fabric/domain_lock.h"
#include "memory/region.h"

namespace nnf::memory {

class FabricRegistrar : public Registrar {
 public:
  // `info` is the fi_info the domain was opened with (its caps and domain_attr->mr_mode decide
  // how we register); it is read here only. `domainLock` serialises every fi_mr_* call with the
  // caller's other uses of the domain (it may be FI_THREAD_DOMAIN). `endpoint` is needed only
  // under FI_MR_ENDPOINT and may also be given later with bindEndpoint().
  // Throws std::invalid_argument for a null domain or info.
  FabricRegistrar(fid_domain* domain, const fi_info* info, fabric::DomainLock& domainLock,
                  fid_ep* endpoint = nullptr);

  // Caller must not hold domainLock (we take it).
  int registerRegion(const Region& region, Registration* out) override;
  int deregister(Registration& registration) override;
  // The same for callers that already hold domainLock (connection set-up registers its control
  // buffers under the device lock).
  int registerLocked(const Region& region, Registration* out) override;
  int deregisterLocked(Registration& registration) override;

  void bindEndpoint(fid_ep* endpoint) { endpoint_ = endpoint; }

  uint64_t mrMode() const { return mrMode_; }
  bool providerHasHmem() const { return hmem_; }
  bool needsEndpoint() const { return (mrMode_ & FI_MR_ENDPOINT) != 0; }
  bool providerKeys() const { return (mrMode_ & FI_MR_PROV_KEY) != 0; }
  bool virtualAddressing() const { return (mrMode_ & FI_MR_VIRT_ADDR) != 0; }

 private:
  int checkRegion(const Region& region) const;
  int takeKey(uint64_t* key);
  void returnKey(uint64_t key);
  // registerLocked()'s provider calls: takes a key where the application chooses them,
  // registers `attr`, binds and enables where mr_mode asks. Warns and undoes on failure.
  int openRegistration(const Region& region, fi_mr_attr& attr, uint64_t flags, fid_mr** out,
                       uint64_t* outKey);

  fid_domain* domain_;
  fabric::DomainLock& lock_;
  fid_ep* endpoint_;
  uint64_t mrMode_;
  bool hmem_;
  size_t keySize_;
  // App-chosen keys (no FI_MR_PROV_KEY) must be unique in the domain: a counter plus the keys
  // of released registrations, so small key spaces (mr_key_size 2) do not run out.
  uint64_t nextKey_ = 1;
  std::vector<uint64_t> freeKeys_;
};

}  // namespace nnf::memory
