#include "raw_engine.h"

#include <unistd.h>

#include <cstdio>

#include <random>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <cstring>

namespace nnf::perf {
namespace {

constexpr int kCqBatch = 32;

uint64_t makeTag(int srcRank, int index, uint32_t seq) {
  return (static_cast<uint64_t>(srcRank & 0xffff) << 48) |
         (static_cast<uint64_t>(index & 0xffff) << 32) | seq;
}

}  // namespace

RawEngine::~RawEngine() {
  close();
}

bool RawEngine::fail(const char* what, int rc) {
  error_ = std::string("raw libfabric: ") + what + ": " + fi_strerror(-rc) + " (" +
           std::to_string(rc) + ")";
  return false;
}

bool RawEngine::open() {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // The modes a simple application can honour: register what it sends, local descriptors.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  if (!provider_.empty()) hints->fabric_attr->prov_name = strdup(provider_.c_str());
  int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_);
  fi_freeinfo(hints);
  if (rc != 0) {
    info_ = nullptr;
    return fail(("fi_getinfo (RDM, tagged, provider '" + provider_ + "')").c_str(), rc);
  }
  if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr)) != 0) return fail("fi_fabric", rc);
  if ((rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0) return fail("fi_domain", rc);
  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_TAGGED;
  cqAttr.size = pool_.size();
  if ((rc = fi_cq_open(domain_, &cqAttr, &cq_, nullptr)) != 0) return fail("fi_cq_open", rc);
  fi_av_attr avAttr{};
  avAttr.type = FI_AV_TABLE;
  if ((rc = fi_av_open(domain_, &avAttr, &av_, nullptr)) != 0) return fail("fi_av_open", rc);
  if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr)) != 0) return fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0)
    return fail("fi_ep_bind cq", rc);
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) return fail("fi_ep_bind av", rc);
  if (std::strcmp(info_->fabric_attr->prov_name, "shm") == 0 && info_->addr_format == FI_ADDR_STR) {
    // shm's default region name is the pid; a region left behind by a killed process with a
    // recycled pid would make fi_enable fail with -FI_EBUSY. Use a name of our own, as the plugin.
    char name[64];
    std::snprintf(name, sizeof(name), "fi_shm://nnf-raw-%d-%08x", static_cast<int>(getpid()),
                  static_cast<unsigned>(std::random_device{}()));
    if ((rc = fi_setname(&ep_->fid, name, std::strlen(name) + 1)) != 0)
      return fail("fi_setname", rc);
  }
  if ((rc = fi_enable(ep_)) != 0) return fail("fi_enable", rc);
  return true;
}

std::string RawEngine::description() const {
  if (info_ == nullptr) return "not open";
  return std::string(info_->fabric_attr->prov_name) + " domain " + info_->domain_attr->name;
}

bool RawEngine::connect(Bootstrap& boot, int comms) {
  rank_ = boot.rank();
  comms_ = comms;
  // Enough for every link's full window in both directions plus acknowledgements; the CQ is
  // sized to match so that it can never overrun.
  pool_ = std::vector<Request>(static_cast<size_t>(boot.size()) * comms * 2 * 40 + 64);
  free_ = nullptr;
  for (auto& req : pool_) giveRequest(&req);
  if (!open()) return false;
  char name[256];
  size_t len = sizeof(name);
  int rc = fi_getname(&ep_->fid, name, &len);
  if (rc != 0) return fail("fi_getname", rc);
  std::vector<std::string> mine(boot.size(), std::string(name, len)), theirs;
  if (!boot.exchange(mine, &theirs)) {
    error_ = boot.error();
    return false;
  }
  peers_.assign(boot.size(), FI_ADDR_UNSPEC);
  for (int peer = 0; peer < boot.size(); ++peer) {
    if (peer == rank_) continue;
    rc = fi_av_insert(av_, theirs[peer].data(), 1, &peers_[peer], 0, nullptr);
    if (rc != 1) return fail("fi_av_insert", rc < 0 ? rc : -FI_EINVAL);
  }
  sendSeq_.assign(boot.size() * comms, 0);
  recvSeq_.assign(boot.size() * comms, 0);
  return true;
}

RawEngine::Request* RawEngine::takeRequest() {
  Request* req = free_;
  if (req == nullptr) return nullptr;
  free_ = req->nextFree;
  req->done = false;
  req->failed = false;
  req->bytes = 0;
  return req;
}

void RawEngine::giveRequest(Request* req) {
  req->nextFree = free_;
  free_ = req;
}

void* RawEngine::desc(void* mh) const {
  // Descriptors matter only where the provider asks for local registration.
  if (mh == nullptr || (info_->domain_attr->mr_mode & FI_MR_LOCAL) == 0) return nullptr;
  return fi_mr_desc(static_cast<fid_mr*>(mh));
}

bool RawEngine::regMr(Dir dir, int peer, int index, void* data, size_t bytes, void** mh) {
  fid_mr* mr = nullptr;
  int rc = fi_mr_reg(domain_, data, bytes, FI_SEND | FI_RECV, 0, nextKey_++, 0, &mr, nullptr);
  if (rc != 0) return fail("fi_mr_reg", rc);
  *mh = mr;
  return true;
}

bool RawEngine::deregMr(Dir dir, int peer, int index, void* mh) {
  int rc = fi_close(&static_cast<fid_mr*>(mh)->fid);
  return rc == 0 || fail("fi_close(mr)", rc);
}

bool RawEngine::progress() {
  fi_cq_tagged_entry entries[kCqBatch];
  for (;;) {
    ssize_t n = fi_cq_read(cq_, entries, kCqBatch);
    if (n == -FI_EAGAIN) return true;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      ssize_t rc = fi_cq_readerr(cq_, &err, 0);
      if (rc < 0) return fail("fi_cq_readerr", static_cast<int>(rc));
      auto* req = static_cast<Request*>(err.op_context);
      char text[256];
      const char* provText = fi_cq_strerror(cq_, err.prov_errno, err.err_data, text, sizeof(text));
      if (req == nullptr) {
        error_ =
            std::string("raw libfabric: completion error without context: ") + fi_strerror(err.err);
        return false;
      }
      req->done = true;
      req->failed = true;
      req->failure = std::string(fi_strerror(err.err)) + " (" + (provText ? provText : "") + ")";
      continue;
    }
    if (n < 0) return fail("fi_cq_read", static_cast<int>(n));
    for (ssize_t i = 0; i < n; ++i) {
      auto* req = static_cast<Request*>(entries[i].op_context);
      req->done = true;
      req->bytes = entries[i].len;
    }
    if (n < kCqBatch) return true;
  }
}

template <typename Post>
bool RawEngine::start(const char* what, uint32_t* seq, void** request, Post&& post) {
  *request = nullptr;
  Request* req = takeRequest();
  if (req == nullptr) return progress();
  ssize_t rc = post(*seq, &req->ctx);
  if (rc == -FI_EAGAIN) {
    // Queue full: drain completions and let the caller retry, as the plugin asks NCCL to.
    giveRequest(req);
    return progress();
  }
  if (rc != 0) {
    giveRequest(req);
    return fail(what, static_cast<int>(rc));
  }
  ++*seq;
  *request = req;
  return true;
}

bool RawEngine::isend(int peer, int index, void* data, size_t bytes, void* mh, void** request) {
  return start(
      "fi_tsend", &sendSeq_[peer * comms_ + index], request, [&](uint32_t seq, fi_context2* ctx) {
        return fi_tsend(ep_, data, bytes, desc(mh), peers_[peer], makeTag(rank_, index, seq), ctx);
      });
}

bool RawEngine::irecv(int peer, int index, void* data, size_t bytes, void* mh, void** request) {
  return start("fi_trecv", &recvSeq_[peer * comms_ + index], request,
               [&](uint32_t seq, fi_context2* ctx) {
                 return fi_trecv(ep_, data, bytes, desc(mh), FI_ADDR_UNSPEC,
                                 makeTag(peer, index, seq), 0, ctx);
               });
}

bool RawEngine::test(void* request, int* done, size_t* bytes) {
  auto* req = static_cast<Request*>(request);
  *done = 0;
  if (!req->done && !progress()) return false;
  if (!req->done) return true;
  *done = 1;
  *bytes = req->bytes;
  bool failed = req->failed;
  if (failed) error_ = "raw libfabric: completion error: " + req->failure;
  giveRequest(req);
  return !failed;
}

bool RawEngine::close() {
  // Reverse order of creation; each close is attempted even after a failure.
  if (ep_ != nullptr) fi_close(&ep_->fid), ep_ = nullptr;
  if (av_ != nullptr) fi_close(&av_->fid), av_ = nullptr;
  if (cq_ != nullptr) fi_close(&cq_->fid), cq_ = nullptr;
  if (domain_ != nullptr) fi_close(&domain_->fid), domain_ = nullptr;
  if (fabric_ != nullptr) fi_close(&fabric_->fid), fabric_ = nullptr;
  if (info_ != nullptr) fi_freeinfo(info_), info_ = nullptr;
  return true;
}

}  // namespace nnf::perf
