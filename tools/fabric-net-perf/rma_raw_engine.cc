#include "rma_raw_engine.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>

namespace nnf::perf {
namespace {

constexpr int kCqBatch = 32;
// Requests per rank: more than the rma mode keeps in flight (32 per peer, 8 ranks at most).
constexpr size_t kPoolSize = 1024;

}  // namespace

RmaRawEngine::~RmaRawEngine() {
  close();
}

bool RmaRawEngine::fail(const char* what, int rc) {
  error_ = std::string("raw libfabric: ") + what + ": " + fi_strerror(-rc) + " (" +
           std::to_string(rc) + ")";
  return false;
}

bool RmaRawEngine::open() {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  if (!provider_.empty()) hints->fabric_attr->prov_name = strdup(provider_.c_str());
  int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_);
  fi_freeinfo(hints);
  if (rc != 0) {
    info_ = nullptr;
    return fail(("fi_getinfo (RDM, RMA, provider '" + provider_ + "')").c_str(), rc);
  }
  if (info_->domain_attr->cq_data_size < 4)
    return fail("the provider carries fewer than 4 bytes of remote CQ data", -FI_ENOSYS);
  if (info_->mode & FI_RX_CQ_DATA)
    return fail("the provider wants FI_RX_CQ_DATA (receives for remote CQ data)", -FI_ENOSYS);
  if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr)) != 0) return fail("fi_fabric", rc);
  if ((rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0) return fail("fi_domain", rc);
  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_DATA;
  cqAttr.size = kPoolSize * 2;
  if ((rc = fi_cq_open(domain_, &cqAttr, &cq_, nullptr)) != 0) return fail("fi_cq_open", rc);
  fi_av_attr avAttr{};
  avAttr.type = FI_AV_TABLE;
  if ((rc = fi_av_open(domain_, &avAttr, &av_, nullptr)) != 0) return fail("fi_av_open", rc);
  if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr)) != 0) return fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0)
    return fail("fi_ep_bind cq", rc);
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) return fail("fi_ep_bind av", rc);
  if (std::strcmp(info_->fabric_attr->prov_name, "shm") == 0 && info_->addr_format == FI_ADDR_STR) {
    // A region name of our own: a pid-named region left by a killed process would make fi_enable
    // fail with -FI_EBUSY (as raw_engine.cc).
    char name[64];
    std::snprintf(name, sizeof(name), "fi_shm://nnf-rawrma-%d-%08x", static_cast<int>(getpid()),
                  static_cast<unsigned>(std::random_device{}()));
    if ((rc = fi_setname(&ep_->fid, name, std::strlen(name) + 1)) != 0)
      return fail("fi_setname", rc);
  }
  if ((rc = fi_enable(ep_)) != 0) return fail("fi_enable", rc);
  return true;
}

std::string RmaRawEngine::description() const {
  if (info_ == nullptr) return "not open";
  return std::string(info_->fabric_attr->prov_name) + " domain " + info_->domain_attr->name +
         ", fi_write / fi_writedata (remote CQ data, read from the target's CQ) / fi_read";
}

bool RmaRawEngine::connect(Bootstrap& boot) {
  rank_ = boot.rank();
  pool_ = std::vector<Request>(kPoolSize);
  free_ = nullptr;
  for (Request& req : pool_) req.next = free_, free_ = &req;
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
  signals_.assign(boot.size(), 0);
  return true;
}

bool RmaRawEngine::regWindow(Bootstrap& boot, char* base, size_t bytes) {
  base_ = base;
  uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  int rc = fi_mr_reg(domain_, base, bytes, access, 0, 1, 0, &mr_, nullptr);
  if (rc != 0) return mr_ = nullptr, fail("fi_mr_reg", rc);
  if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    if ((rc = fi_mr_bind(mr_, &ep_->fid, 0)) != 0 || (rc = fi_mr_enable(mr_)) != 0)
      return fail("fi_mr_bind/fi_mr_enable", rc);
  }
  Remote mine{0, fi_mr_key(mr_)};
  if (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) mine.addr = reinterpret_cast<uintptr_t>(base);
  std::vector<std::string> out(boot.size(),
                               std::string(reinterpret_cast<char*>(&mine), sizeof(mine))),
      in;
  if (!boot.exchange(out, &in)) {
    error_ = boot.error();
    return false;
  }
  remotes_.assign(boot.size(), mine);
  for (int peer = 0; peer < boot.size(); ++peer) {
    if (peer == rank_) continue;
    if (in[peer].size() != sizeof(Remote)) return fail("window exchange", -FI_EINVAL);
    std::memcpy(&remotes_[peer], in[peer].data(), sizeof(Remote));
  }
  return true;
}

bool RmaRawEngine::deregWindow() {
  if (mr_ == nullptr) return true;
  int rc = fi_close(&mr_->fid);
  mr_ = nullptr;
  return rc == 0 || fail("fi_close(mr)", rc);
}

bool RmaRawEngine::progress() {
  fi_cq_data_entry entries[kCqBatch];
  for (;;) {
    ssize_t n = fi_cq_read(cq_, entries, kCqBatch);
    if (n == -FI_EAGAIN) return true;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_, &err, 0);
      return fail("completion error", -err.err);
    }
    if (n < 0) return fail("fi_cq_read", static_cast<int>(n));
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_data_entry& e = entries[i];
      if (e.flags & FI_REMOTE_CQ_DATA) {
        if (e.data < signals_.size()) ++signals_[e.data];
        continue;
      }
      if (e.op_context != nullptr) static_cast<Request*>(e.op_context)->done = true;
    }
  }
}

bool RmaRawEngine::start(Op op, int peer, size_t localOff, size_t remoteOff, size_t bytes,
                         void** request) {
  *request = nullptr;
  Request* req = free_;
  if (req == nullptr) return progress();
  void* local = base_ + localOff;
  void* desc = (info_->domain_attr->mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr_) : nullptr;
  uint64_t addr = remotes_[peer].addr + remoteOff, key = remotes_[peer].key;
  ssize_t rc;
  switch (op) {
    case Op::kWrite:
      rc = fi_write(ep_, local, bytes, desc, peers_[peer], addr, key, &req->ctx);
      break;
    case Op::kWriteData:
      rc = fi_writedata(ep_, local, bytes, desc, static_cast<uint64_t>(rank_), peers_[peer], addr,
                        key, &req->ctx);
      break;
    default:
      rc = fi_read(ep_, local, bytes, desc, peers_[peer], addr, key, &req->ctx);
      break;
  }
  if (rc == -FI_EAGAIN) return progress();
  if (rc != 0) return fail(op == Op::kRead ? "fi_read" : "fi_write", static_cast<int>(rc));
  free_ = req->next;
  req->next = nullptr;
  req->done = false;
  *request = req;
  return true;
}

bool RmaRawEngine::put(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) {
  return start(Op::kWrite, peer, srcOff, dstOff, bytes, request);
}

bool RmaRawEngine::putSignal(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) {
  return start(Op::kWriteData, peer, srcOff, dstOff, bytes, request);
}

bool RmaRawEngine::get(int peer, size_t remoteOff, size_t localOff, size_t bytes, void** request) {
  return start(Op::kRead, peer, localOff, remoteOff, bytes, request);
}

bool RmaRawEngine::test(void* request, int* done) {
  auto* req = static_cast<Request*>(request);
  if (!req->done && !progress()) return false;
  *done = req->done ? 1 : 0;
  if (req->done) req->next = free_, free_ = req;
  return true;
}

bool RmaRawEngine::signals(int peer, uint64_t* count) {
  if (!progress()) return false;
  *count = signals_[peer];
  return true;
}

bool RmaRawEngine::close() {
  bool ok = deregWindow();
  for (fid* f : {ep_ ? &ep_->fid : nullptr, av_ ? &av_->fid : nullptr, cq_ ? &cq_->fid : nullptr,
                 domain_ ? &domain_->fid : nullptr, fabric_ ? &fabric_->fid : nullptr}) {
    if (f != nullptr) fi_close(f);
  }
  ep_ = nullptr, av_ = nullptr, cq_ = nullptr, domain_ = nullptr, fabric_ = nullptr;
  if (info_ != nullptr) fi_freeinfo(info_);
  info_ = nullptr;
  return ok;
}

}  // namespace nnf::perf
