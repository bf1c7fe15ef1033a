#include "raw_endpoint.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>

namespace nnf::tools {

int RawEndpoint::open(fi_info* info, fi_cq_format cqFormat, size_t cqSize, const char* shmName,
                      const char** failed) {
  info_ = info;
  auto fail = [&](const char* call, int rc) {
    *failed = call;
    return rc;
  };
  int rc;
  if ((rc = fi_fabric(info->fabric_attr, &fabric_, nullptr)) != 0) return fail("fi_fabric", rc);
  if ((rc = fi_domain(fabric_, info, &domain_, nullptr)) != 0) return fail("fi_domain", rc);
  fi_cq_attr cqAttr{};
  cqAttr.format = cqFormat;
  cqAttr.size = cqSize;
  if ((rc = fi_cq_open(domain_, &cqAttr, &cq_, nullptr)) != 0) return fail("fi_cq_open", rc);
  fi_av_attr avAttr{};
  avAttr.type = FI_AV_TABLE;
  if ((rc = fi_av_open(domain_, &avAttr, &av_, nullptr)) != 0) return fail("fi_av_open", rc);
  if ((rc = fi_endpoint(domain_, info, &ep_, nullptr)) != 0) return fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0)
    return fail("fi_ep_bind cq", rc);
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) return fail("fi_ep_bind av", rc);
  if (std::strcmp(info->fabric_attr->prov_name, "shm") == 0 && info->addr_format == FI_ADDR_STR) {
    char name[64];
    std::snprintf(name, sizeof(name), "fi_shm://%s-%d-%08x", shmName, static_cast<int>(getpid()),
                  static_cast<unsigned>(std::random_device{}()));
    if ((rc = fi_setname(&ep_->fid, name, std::strlen(name) + 1)) != 0)
      return fail("fi_setname", rc);
  }
  if ((rc = fi_enable(ep_)) != 0) return fail("fi_enable", rc);
  return 0;
}

int RawEndpoint::regMr(void* buf, size_t bytes, uint64_t access, uint64_t key, fid_mr** mr,
                       const char** failed) const {
  int rc = fi_mr_reg(domain_, buf, bytes, access, 0, key, 0, mr, nullptr);
  if (rc != 0) {
    *mr = nullptr;
    *failed = "fi_mr_reg";
    return rc;
  }
  if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    if ((rc = fi_mr_bind(*mr, &ep_->fid, 0)) != 0 || (rc = fi_mr_enable(*mr)) != 0) {
      fi_close(&(*mr)->fid);
      *mr = nullptr;
      *failed = "fi_mr_bind/fi_mr_enable";
      return rc;
    }
  }
  return 0;
}

void* RawEndpoint::desc(fid_mr* mr) const {
  if (mr == nullptr || (info_->domain_attr->mr_mode & FI_MR_LOCAL) == 0) return nullptr;
  return fi_mr_desc(mr);
}

int RawEndpoint::name(std::string* address) const {
  char buf[256];
  size_t length = sizeof(buf);
  int rc = fi_getname(&ep_->fid, buf, &length);
  if (rc == 0) address->assign(buf, length);
  return rc;
}

int RawEndpoint::insert(const std::string& address, fi_addr_t* peer) const {
  int rc = fi_av_insert(av_, address.data(), 1, peer, 0, nullptr);
  if (rc == 1) return 0;
  return rc < 0 ? rc : -FI_EINVAL;
}

void RawEndpoint::closeEndpoint() {
  if (ep_ != nullptr) fi_close(&ep_->fid), ep_ = nullptr;
}

void RawEndpoint::close() {
  closeEndpoint();
  if (av_ != nullptr) fi_close(&av_->fid), av_ = nullptr;
  if (cq_ != nullptr) fi_close(&cq_->fid), cq_ = nullptr;
  if (domain_ != nullptr) fi_close(&domain_->fid), domain_ = nullptr;
  if (fabric_ != nullptr) fi_close(&fabric_->fid), fabric_ = nullptr;
  info_ = nullptr;
}

}  // namespace nnf::tools
