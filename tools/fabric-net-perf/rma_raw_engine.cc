#include "rma_raw_engine.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <cstring>

#include "raw_setup.h"

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
  error_ = rawError(what, rc);
  return false;
}

bool RmaRawEngine::open() {
  int rc = getRawInfo(provider_, FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                      kRawMrModes | FI_MR_ENDPOINT, &info_);
  if (rc != 0) return fail(("fi_getinfo (RDM, RMA, provider '" + provider_ + "')").c_str(), rc);
  if (info_->domain_attr->cq_data_size < 4)
    return fail("the provider carries fewer than 4 bytes of remote CQ data", -FI_ENOSYS);
  if (info_->mode & FI_RX_CQ_DATA)
    return fail("the provider wants FI_RX_CQ_DATA (receives for remote CQ data)", -FI_ENOSYS);
  const char* failed = nullptr;
  rc = endpoint_.open(info_, FI_CQ_FORMAT_DATA, kPoolSize * 2, "nnf-rawrma", &failed);
  return rc == 0 || fail(failed, rc);
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
  if (!open() || !exchangeRawAddresses(boot, endpoint_, &peers_, &error_)) return false;
  signals_.assign(boot.size(), 0);
  return true;
}

bool RmaRawEngine::regWindow(Bootstrap& boot, char* base, size_t bytes) {
  base_ = base;
  uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  const char* failed = nullptr;
  int rc = endpoint_.regMr(base, bytes, access, 1, &mr_, &failed);
  if (rc != 0) return fail(failed, rc);
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
    ssize_t n = fi_cq_read(endpoint_.cq(), entries, kCqBatch);
    if (n == -FI_EAGAIN) return true;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(endpoint_.cq(), &err, 0);
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
  void* desc = endpoint_.desc(mr_);
  uint64_t addr = remotes_[peer].addr + remoteOff, key = remotes_[peer].key;
  ssize_t rc;
  switch (op) {
    case Op::kWrite:
      rc = fi_write(endpoint_.ep(), local, bytes, desc, peers_[peer], addr, key, &req->ctx);
      break;
    case Op::kWriteData:
      rc = fi_writedata(endpoint_.ep(), local, bytes, desc, static_cast<uint64_t>(rank_),
                        peers_[peer], addr, key, &req->ctx);
      break;
    default:
      rc = fi_read(endpoint_.ep(), local, bytes, desc, peers_[peer], addr, key, &req->ctx);
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
  endpoint_.close();
  if (info_ != nullptr) fi_freeinfo(info_);
  info_ = nullptr;
  return ok;
}

}  // namespace nnf::perf
