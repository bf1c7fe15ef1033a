// One FI_EP_RDM endpoint on a fabric and domain of its own, with one CQ for everything it posts
// and an AV table: what the tools' raw-libfabric code opens beside the plugin (fabric-net-perf's
// two raw engines, fabric-rma-probe). The caller picks the fi_info and owns it.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace nnf::tools {

class RawEndpoint {
 public:
  RawEndpoint() = default;
  ~RawEndpoint() { close(); }
  RawEndpoint(const RawEndpoint&) = delete;
  RawEndpoint& operator=(const RawEndpoint&) = delete;

  // Opens the fabric, domain, a CQ of `cqFormat` with `cqSize` entries, the AV table and the
  // endpoint `info` describes, binds them and enables the endpoint. On shm with string addresses
  // the endpoint is named fi_shm://<shmName>-<pid>-<random>: shm's default name (the pid) may be
  // a region left behind by a killed process, and fi_enable would fail with -FI_EBUSY. `info`
  // must outlive the endpoint. 0, or the negative libfabric error with *failed naming the call.
  int open(fi_info* info, fi_cq_format cqFormat, size_t cqSize, const char* shmName,
           const char** failed);

  // Registers `bytes` at `buf` with `access` and `key`, bound to the endpoint and enabled where
  // the domain asks for it (FI_MR_ENDPOINT). 0, or the negative error with *failed naming the
  // call; nothing stays registered then.
  int regMr(void* buf, size_t bytes, uint64_t access, uint64_t key, fid_mr** mr,
            const char** failed) const;
  // The descriptor to post `mr`'s memory with: nullptr unless the provider wants local
  // registration (FI_MR_LOCAL), or for no registration.
  void* desc(fid_mr* mr) const;

  // The endpoint's address (fi_getname): 0 or the negative error.
  int name(std::string* address) const;
  // Inserts one peer's address into the AV: 0, or the negative error (-FI_EINVAL when the AV
  // took nothing without saying why).
  int insert(const std::string& address, fi_addr_t* peer) const;

  // The endpoint alone, for a caller that must close its own objects between it and the rest
  // (a registration its posted receives use).
  void closeEndpoint();
  // Everything, in reverse order of opening; every close is attempted.
  void close();

  fid_ep* ep() const { return ep_; }
  fid_cq* cq() const { return cq_; }

 private:
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
};

}  // namespace nnf::tools
