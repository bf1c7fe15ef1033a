#include "memory/fabric_registrar.h"

#include <sys/uio.h>
#include <stdexcept>

#include <rdma/fi_errno.h>

#include "fabric/legacy_mr_bits.h"
#include "log/log.h"

namespace nnf::memory {
namespace {

// Old-style mr_mode: FI_MR_BASIC (fabric::kLegacyMrBasic) stands for these bits (fi_mr(3)).
constexpr uint64_t kBasicBits = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;

void warnRefused(const Region& region, const char* what, int rc) {
  // A refused DMA-BUF registration is retried by address; the caller warns once for both.
  if (region.type == MemType::kDmaBuf) {
    NNF_INFO(abi::kLogSubsysNet, "DMA-BUF registration of %p (%zu bytes) refused: %s: %s (%d)",
             region.base, region.length, what, fi_strerror(-rc), rc);
    return;
  }
  NNF_WARN("Memory registration refused: %s buffer %p, %zu bytes, device %d: %s: %s (%d)",
           memTypeName(region.type), region.base, region.length, region.device, what,
           fi_strerror(-rc), rc);
}

}  // namespace

const char* memTypeName(MemType type) {
  switch (type) {
    case MemType::kHost:
      return "host";
    case MemType::kCuda:
      return "CUDA";
    case MemType::kDmaBuf:
      return "DMA-BUF";
  }
  return "unknown";
}

FabricRegistrar::FabricRegistrar(fid_domain* domain, const fi_info* info,
                                 fabric::DomainLock& domainLock, fid_ep* endpoint)
    : domain_(domain), lock_(domainLock), endpoint_(endpoint) {
  if (domain == nullptr || info == nullptr || info->domain_attr == nullptr)
    throw std::invalid_argument("FabricRegistrar needs an open domain and its fi_info");
  mrMode_ = static_cast<uint64_t>(info->domain_attr->mr_mode);
  if (mrMode_ & fabric::kLegacyMrBasic) mrMode_ |= kBasicBits;
  hmem_ = (info->caps & FI_HMEM) != 0;
  keySize_ = info->domain_attr->mr_key_size;
}

int FabricRegistrar::checkRegion(const Region& region) const {
  if (region.base == nullptr || region.length == 0) return -FI_EINVAL;
  switch (region.type) {
    case MemType::kHost:
      return 0;
    case MemType::kCuda:
    case MemType::kDmaBuf:
      if (region.device < 0) return -FI_EINVAL;
      if (!NNF_HAVE_FI_HMEM || !hmem_) return -FI_EOPNOTSUPP;
      if (region.type == MemType::kDmaBuf) {
        if (!NNF_HAVE_FI_MR_DMABUF) return -FI_EOPNOTSUPP;
        if (region.dmabufFd < 0) return -FI_EBADF;
      }
      return 0;
  }
  return -FI_EINVAL;  // a memory type this build does not know
}

int FabricRegistrar::takeKey(uint64_t* key) {
  if (!freeKeys_.empty()) {
    *key = freeKeys_.back();
    freeKeys_.pop_back();
    return 0;
  }
  // A key must fit in the provider's key size (0 means "no limit stated": assume 64 bits).
  if (keySize_ > 0 && keySize_ < sizeof(uint64_t) && nextKey_ >> (8 * keySize_) != 0)
    return -FI_ENOKEY;
  *key = nextKey_++;
  return 0;
}

void FabricRegistrar::returnKey(uint64_t key) {
  freeKeys_.push_back(key);
}

int FabricRegistrar::registerRegion(const Region& region, Registration* out) {
  std::lock_guard<fabric::DomainLock> guard(lock_);
  return registerLocked(region, out);
}

int FabricRegistrar::deregister(Registration& registration) {
  std::lock_guard<fabric::DomainLock> guard(lock_);
  return deregisterLocked(registration);
}

int FabricRegistrar::registerLocked(const Region& region, Registration* out) {
  int rc = checkRegion(region);
  if (rc != 0) {
    warnRefused(region,
                rc == -FI_EOPNOTSUPP ? "the provider or this libfabric build lacks support"
                                     : "invalid region",
                rc);
    return rc;
  }
  if (needsEndpoint() && endpoint_ == nullptr) {
    warnRefused(region, "provider needs FI_MR_ENDPOINT but no endpoint was given", -FI_EINVAL);
    return -FI_EINVAL;
  }

  iovec iov{const_cast<void*>(region.base), region.length};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = region.access;
  attr.offset = 0;  // without FI_MR_VIRT_ADDR the peer addresses the region from 0
  uint64_t flags = 0;
#if NNF_HAVE_FI_HMEM
  attr.iface = region.type == MemType::kHost ? FI_HMEM_SYSTEM : FI_HMEM_CUDA;
  if (region.type != MemType::kHost) attr.device.cuda = region.device;
#endif
#if NNF_HAVE_FI_MR_DMABUF
  fi_mr_dmabuf dmabuf{};
  if (region.type == MemType::kDmaBuf) {
    dmabuf.fd = region.dmabufFd;
    dmabuf.offset = region.dmabufOffset;
    dmabuf.len = region.length;
    // base_addr is where the whole DMA-BUF starts; the registration begins `offset` into it.
    dmabuf.base_addr =
        const_cast<char*>(static_cast<const char*>(region.base)) - region.dmabufOffset;
    attr.dmabuf = &dmabuf;
    flags |= FI_MR_DMABUF;
  }
#endif

  uint64_t key = 0;
  fid_mr* mr = nullptr;
  rc = openRegistration(region, attr, flags, &mr, &key);
  if (rc != 0) return rc;
  out->desc = fi_mr_desc(mr);
  out->key = key;
  out->remoteBase = virtualAddressing() ? reinterpret_cast<uint64_t>(region.base) : 0;
  out->base = region.base;
  out->length = region.length;
  out->provider = mr;
  return 0;
}

int FabricRegistrar::openRegistration(const Region& region, fi_mr_attr& attr, uint64_t flags,
                                      fid_mr** out, uint64_t* outKey) {
  uint64_t key = 0;
  if (!providerKeys()) {
    int rc = takeKey(&key);
    if (rc != 0) {
      warnRefused(region, "no free application key in the provider's key space", rc);
      return rc;
    }
    attr.requested_key = key;
  }
  fid_mr* mr = nullptr;
  int rc = fi_mr_regattr(domain_, &attr, flags, &mr);
  if (rc != 0) {
    if (!providerKeys()) returnKey(key);
    warnRefused(region, "fi_mr_regattr failed", rc);
    return rc;
  }
  if (needsEndpoint() || (mrMode_ & FI_MR_RMA_EVENT)) {
    if (needsEndpoint()) rc = fi_mr_bind(mr, &endpoint_->fid, 0);
    if (rc == 0) rc = fi_mr_enable(mr);
    if (rc != 0) {
      fi_close(&mr->fid);
      if (!providerKeys()) returnKey(key);
      warnRefused(region, "binding the registration to the endpoint failed", rc);
      return rc;
    }
  }
  if (providerKeys()) {
    key = fi_mr_key(mr);
    if (key == FI_KEY_NOTAVAIL) {  // FI_MR_RAW keys longer than 64 bits: not supported
      fi_close(&mr->fid);
      warnRefused(region, "the provider's key does not fit 64 bits (FI_MR_RAW)", -FI_ENOKEY);
      return -FI_ENOKEY;
    }
  }
  *out = mr;
  *outKey = key;
  return 0;
}

int FabricRegistrar::deregisterLocked(Registration& registration) {
  auto* mr = static_cast<fid_mr*>(registration.provider);
  if (mr == nullptr) return -FI_EINVAL;
  int rc = fi_close(&mr->fid);
  if (rc != 0) {
    NNF_WARN("Memory deregistration of %p (%zu bytes) failed: %s (%d)", registration.base,
             registration.length, fi_strerror(-rc), rc);
    return rc;
  }
  if (!providerKeys()) returnKey(registration.key);
  registration = Registration{};
  return 0;
}

}  // namespace nnf::memory
