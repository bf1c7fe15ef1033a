#include "raw_engine.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <algorithm>

#include "raw_setup.h"

namespace nnf::perf {
namespace {

constexpr int kCqBatch = 32;
// rma: clear-to-send messages carry this bit in their tag (never set by a data tag).
constexpr uint64_t kCtsTag = uint64_t{1} << 62;
constexpr uint64_t kSeqBits = 0xffffffffULL;
// CTS messages held per link: more than a window of receives plus the acknowledgement.
constexpr uint32_t kCtsRing = 128;
// CTS receives posted per link: a full window (NCCL_NET_MAX_REQUESTS) plus the acknowledgement,
// so that no CTS ever arrives unexpected where the receive queue allows it. shm on libfabric
// 1.17 loses unexpected tagged messages once a dozen wait (docs/rma-providers.md).
constexpr size_t kCtsPostedPerLink = 33;
// Immediate data: request id in the high 16 bits, size code in the low 16.
constexpr uint64_t kFullSize = 0xffff;

uint64_t makeTag(int srcRank, int index, uint32_t seq) {
  return (static_cast<uint64_t>(srcRank & 0xffff) << 48) |
         (static_cast<uint64_t>(index & 0xffff) << 32) | seq;
}

}  // namespace

RawEngine::~RawEngine() {
  close();
}

bool RawEngine::fail(const char* what, int rc) {
  error_ = rawError(what, rc);
  return false;
}

bool RawEngine::open() {
  uint64_t caps = FI_TAGGED;
  uint64_t mrModes = kRawMrModes;
  if (protocol_ == RawProtocol::kRma) {
    // Writes with remote CQ data; registrations bound to the endpoint where asked.
    caps |= FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    mrModes |= FI_MR_ENDPOINT;
  }
  int rc = getRawInfo(provider_, caps, mrModes, &info_);
  if (rc != 0) {
    return fail(("fi_getinfo (RDM, tagged" +
                 std::string(protocol_ == RawProtocol::kRma ? ", RMA writes" : "") +
                 ", provider '" + provider_ + "')")
                    .c_str(),
                rc);
  }
  if (protocol_ == RawProtocol::kRma) {
    if (info_->domain_attr->cq_data_size < 4)
      return fail("rma: the provider carries fewer than 4 bytes of remote CQ data", -FI_ENOSYS);
    if (info_->tx_attr->inject_size < sizeof(Cts))
      return fail("rma: inject_size too small for a clear-to-send message", -FI_ENOSYS);
    if (info_->mode & FI_RX_CQ_DATA)
      return fail("rma: the provider wants FI_RX_CQ_DATA (receives for remote CQ data)",
                  -FI_ENOSYS);
  }
  const char* failed = nullptr;
  rc = endpoint_.open(info_, FI_CQ_FORMAT_TAGGED, pool_.size(), "nnf-raw", &failed);
  return rc == 0 || fail(failed, rc);
}

std::string RawEngine::description() const {
  if (info_ == nullptr) return "not open";
  std::string text =
      std::string(info_->fabric_attr->prov_name) + " domain " + info_->domain_attr->name;
  if (protocol_ == RawProtocol::kRma)
    text += ", rma: fi_writedata with 4-byte remote CQ data after a clear-to-send per message";
  return text;
}

bool RawEngine::connect(Bootstrap& boot, int comms) {
  rank_ = boot.rank();
  comms_ = comms;
  // Enough for every link's full window in both directions plus acknowledgements; the CQ is
  // sized to match so that it can never overrun.
  pool_ = std::vector<Request>(static_cast<size_t>(boot.size()) * comms * 2 * 40 + 64);
  free_ = nullptr;
  for (auto& req : pool_) giveRequest(&req);
  if (!open() || !exchangeRawAddresses(boot, endpoint_, &peers_, &error_)) return false;
  sendSeq_.assign(boot.size() * comms, 0);
  recvSeq_.assign(boot.size() * comms, 0);
  return protocol_ != RawProtocol::kRma || setupRma();
}

RawEngine::Request* RawEngine::takeRequest() {
  Request* req = free_;
  if (req == nullptr) return nullptr;
  free_ = req->next;
  req->next = nullptr;
  req->done = false;
  req->failed = false;
  req->bytes = 0;
  req->awaitingWrite = false;
  return req;
}

void RawEngine::giveRequest(Request* req) {
  req->next = free_;
  free_ = req;
}

void* RawEngine::desc(void* mh) const {
  return mh == nullptr ? nullptr : endpoint_.desc(static_cast<Mr*>(mh)->mr);
}

bool RawEngine::regMr(Dir dir, int peer, int index, void* data, size_t bytes, void** mh) {
  fid_mr* mr = nullptr;
  uint64_t access = FI_SEND | FI_RECV;
  if (protocol_ == RawProtocol::kRma) access |= FI_WRITE | FI_REMOTE_WRITE;
  const char* failed = nullptr;
  int rc = endpoint_.regMr(data, bytes, access, nextKey_++, &mr, &failed);
  if (rc != 0) return fail(failed, rc);
  *mh = new Mr{mr, reinterpret_cast<uintptr_t>(data)};
  return true;
}

bool RawEngine::deregMr(Dir dir, int peer, int index, void* mh) {
  auto* handle = static_cast<Mr*>(mh);
  int rc = fi_close(&handle->mr->fid);
  delete handle;
  return rc == 0 || fail("fi_close(mr)", rc);
}

bool RawEngine::progress() {
  fi_cq_tagged_entry entries[kCqBatch];
  for (;;) {
    ssize_t n = fi_cq_read(endpoint_.cq(), entries, kCqBatch);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      ssize_t rc = fi_cq_readerr(endpoint_.cq(), &err, 0);
      if (rc < 0) return fail("fi_cq_readerr", static_cast<int>(rc));
      char text[256];
      const char* provText =
          fi_cq_strerror(endpoint_.cq(), err.prov_errno, err.err_data, text, sizeof(text));
      auto* op = static_cast<Op*>(err.op_context);
      if (op == nullptr || op->kind != Op::Kind::kRequest) {
        error_ = std::string("raw libfabric: completion error ") +
                 (op == nullptr ? "without context" : "on a clear-to-send receive") + ": " +
                 fi_strerror(err.err) + " (" + (provText ? provText : "") + ")";
        return false;
      }
      auto* req = static_cast<Request*>(op);
      req->done = true;
      req->failed = true;
      req->failure = std::string(fi_strerror(err.err)) + " (" + (provText ? provText : "") + ")";
      continue;
    }
    if (n < 0) return fail("fi_cq_read", static_cast<int>(n));
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_tagged_entry& e = entries[i];
      if (protocol_ == RawProtocol::kRma) {
        // A remote write: known by its data and no receive (shm on 2.x sets neither FI_RMA
        // nor FI_REMOTE_WRITE, and its op_context is not ours to read).
        if ((e.flags & FI_REMOTE_CQ_DATA) != 0 && (e.flags & FI_RECV) == 0) {
          if (!remoteWrite(e.data)) return false;
          continue;
        }
        auto* op = static_cast<Op*>(e.op_context);
        if (op->kind == Op::Kind::kCtsRecv) {
          if (!ctsArrived(static_cast<CtsRecv*>(op), e.tag)) return false;
          continue;
        }
        static_cast<Request*>(op)->done = true;  // a write: its size was set when posted
        continue;
      }
      auto* req = static_cast<Request*>(static_cast<Op*>(e.op_context));
      req->done = true;
      req->bytes = e.len;
    }
    if (n < kCqBatch) break;
  }
  if (protocol_ != RawProtocol::kRma) return true;
  // Receives for CTS messages a full queue kept back, and sends whose CTS has come.
  while (!toRepost_.empty()) {
    ssize_t rc = postCtsRecv(toRepost_.back());
    if (rc == -FI_EAGAIN) break;
    if (rc != 0) return fail("fi_trecv (clear-to-send)", static_cast<int>(rc));
    toRepost_.pop_back();
  }
  if (queuedSends_ > 0)
    for (Link& link : links_)
      if (link.head != nullptr && !startSends(link)) return false;
  return true;
}

template <typename Post>
bool RawEngine::start(const char* what, uint32_t* seq, void** request, Post&& post) {
  *request = nullptr;
  Request* req = takeRequest();
  if (req == nullptr) return progress();
  ssize_t rc = post(*seq, static_cast<Op*>(req));
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
  if (protocol_ == RawProtocol::kRma) return isendRma(peer, index, data, bytes, mh, request);
  return start("fi_tsend", &sendSeq_[peer * comms_ + index], request, [&](uint32_t seq, Op* ctx) {
    return fi_tsend(endpoint_.ep(), data, bytes, desc(mh), peers_[peer], makeTag(rank_, index, seq),
                    ctx);
  });
}

bool RawEngine::irecv(int peer, int index, void* data, size_t bytes, void* mh, void** request) {
  if (protocol_ == RawProtocol::kRma) return irecvRma(peer, index, data, bytes, mh, request);
  return start("fi_trecv", &recvSeq_[peer * comms_ + index], request, [&](uint32_t seq, Op* ctx) {
    return fi_trecv(endpoint_.ep(), data, bytes, desc(mh), FI_ADDR_UNSPEC,
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
  // Reverse order of creation; each close is attempted even after a failure. The endpoint goes
  // first: the clear-to-send receives posted on it use ctsMr_.
  endpoint_.closeEndpoint();
  if (ctsMr_ != nullptr) fi_close(&ctsMr_->fid), ctsMr_ = nullptr;
  endpoint_.close();
  if (info_ != nullptr) fi_freeinfo(info_), info_ = nullptr;
  return true;
}

// ---- rma ---------------------------------------------------------------------------------------

bool RawEngine::setupRma() {
  if (pool_.size() > 0xffff) {
    error_ = "raw libfabric: rma: more requests than 16 bits of immediate data can name";
    return false;
  }
  size_t count = peers_.size() * static_cast<size_t>(comms_);
  links_.assign(count, Link());
  for (Link& link : links_) {
    link.cts.assign(kCtsRing, Cts{});
    link.ctsValid.assign(kCtsRing, 0);
  }
  // CTS receives per link, within the receive queue (they are the only receives posted); with
  // more links than it holds, CTS messages also wait as unexpected messages.
  size_t perLink = kCtsPostedPerLink;
  size_t rxSize = info_->rx_attr->size;
  size_t realLinks = count - static_cast<size_t>(comms_);  // none to ourselves
  if (rxSize > 0 && realLinks > 0)
    perLink = std::max<size_t>(1, std::min(perLink, rxSize / realLinks));
  ctsRecvs_ = std::vector<CtsRecv>(count * perLink);
  toRepost_.reserve(ctsRecvs_.size());
  if (info_->domain_attr->mr_mode & FI_MR_LOCAL) {
    const char* failed = nullptr;
    int rc = endpoint_.regMr(ctsRecvs_.data(), ctsRecvs_.size() * sizeof(CtsRecv), FI_RECV,
                             nextKey_++, &ctsMr_, &failed);
    if (rc != 0) return fail((std::string(failed) + " (clear-to-send receives)").c_str(), rc);
  }
  for (size_t i = 0; i < ctsRecvs_.size(); ++i) {
    CtsRecv& c = ctsRecvs_[i];
    c.kind = Op::Kind::kCtsRecv;
    c.link = static_cast<int>(i / perLink);
    if (c.link / comms_ == rank_) continue;  // no link to ourselves
    ssize_t rc;
    while ((rc = postCtsRecv(&c)) == -FI_EAGAIN)
      if (!progress()) return false;
    if (rc != 0) return fail("fi_trecv (clear-to-send)", static_cast<int>(rc));
  }
  return true;
}

ssize_t RawEngine::postCtsRecv(CtsRecv* c) {
  // From the peer of this link, any sequence number: the tag says which one came.
  int peer = c->link / comms_, index = c->link % comms_;
  uint64_t tag = kCtsTag | makeTag(peer, index, 0);
  return fi_trecv(endpoint_.ep(), &c->cts, sizeof(c->cts), endpoint_.desc(ctsMr_), FI_ADDR_UNSPEC,
                  tag, kSeqBits, static_cast<Op*>(c));
}

bool RawEngine::ctsArrived(CtsRecv* c, uint64_t tag) {
  Link& link = links_[c->link];
  uint32_t seq = static_cast<uint32_t>(tag & kSeqBits);
  if (c->cts.seq != seq) {
    error_ = "raw libfabric: rma: clear-to-send with sequence " + std::to_string(c->cts.seq) +
             " under tag sequence " + std::to_string(seq);
    return false;
  }
  uint32_t slot = seq % kCtsRing;
  if (link.ctsValid[slot]) {
    error_ = "raw libfabric: rma: more than " + std::to_string(kCtsRing) +
             " clear-to-send messages waiting on one link";
    return false;
  }
  link.cts[slot] = c->cts;
  link.ctsValid[slot] = 1;
  ssize_t rc = postCtsRecv(c);
  if (rc == -FI_EAGAIN)
    toRepost_.push_back(c);  // capacity reserved: no allocation
  else if (rc != 0)
    return fail("fi_trecv (clear-to-send)", static_cast<int>(rc));
  return link.head == nullptr || startSends(link);
}

bool RawEngine::remoteWrite(uint64_t data) {
  size_t id = (data >> 16) & 0xffff;
  uint64_t code = data & 0xffff;
  if (id >= pool_.size() || !pool_[id].awaitingWrite) {
    error_ = "raw libfabric: rma: a remote write names request " + std::to_string(id) +
             ", which waits for none";
    return false;
  }
  Request& req = pool_[id];
  req.awaitingWrite = false;
  req.done = true;
  req.bytes = code == kFullSize ? req.posted : code;
  return true;
}

bool RawEngine::startSends(Link& link) {
  auto linkIndex = static_cast<size_t>(&link - links_.data());
  int peer = static_cast<int>(linkIndex) / comms_;
  while (Request* req = link.head) {
    uint32_t slot = req->seq % kCtsRing;
    if (!link.ctsValid[slot] || link.cts[slot].seq != req->seq) return true;  // not yet
    const Cts& cts = link.cts[slot];
    size_t bytes = req->posted;
    uint64_t code = bytes == cts.bytes ? kFullSize : bytes;
    bool failed = false;
    if (bytes > cts.bytes) {
      req->failure = "rma: a send of " + std::to_string(bytes) + " bytes to a receive of " +
                     std::to_string(cts.bytes);
      failed = true;
    } else if (code >= kFullSize && bytes != cts.bytes) {
      req->failure = "rma: a send of " + std::to_string(bytes) +
                     " bytes (64 KiB - 1 or more) must fill its receive of " +
                     std::to_string(cts.bytes);
      failed = true;
    } else {
      uint64_t imm = (static_cast<uint64_t>(cts.reqId) << 16) | code;
      ssize_t rc = fi_writedata(endpoint_.ep(), req->data, bytes, desc(req->mh), imm, peers_[peer],
                                cts.addr, cts.key, static_cast<Op*>(req));
      if (rc == -FI_EAGAIN) return true;  // the queue is full: retried from progress
      if (rc != 0) {
        req->failure = std::string("fi_writedata: ") + fi_strerror(static_cast<int>(-rc));
        failed = true;
      }
    }
    req->bytes = bytes;
    if (failed) req->done = true, req->failed = true;
    link.ctsValid[slot] = 0;
    link.head = req->next;
    if (link.head == nullptr) link.tail = nullptr;
    req->next = nullptr;
    --queuedSends_;
  }
  return true;
}

bool RawEngine::isendRma(int peer, int index, void* data, size_t bytes, void* mh, void** request) {
  *request = nullptr;
  Request* req = takeRequest();
  if (req == nullptr) return progress();
  Link& link = links_[peer * comms_ + index];
  req->seq = sendSeq_[peer * comms_ + index]++;
  req->data = data;
  req->mh = mh;
  req->posted = bytes;
  // Queued in sequence order; written once the receive's clear-to-send is here (maybe now).
  if (link.tail != nullptr)
    link.tail->next = req;
  else
    link.head = req;
  link.tail = req;
  ++queuedSends_;
  *request = req;
  return startSends(link);
}

bool RawEngine::irecvRma(int peer, int index, void* data, size_t bytes, void* mh, void** request) {
  *request = nullptr;
  Request* req = takeRequest();
  if (req == nullptr) return progress();
  auto* handle = static_cast<Mr*>(mh);
  uint32_t& seq = recvSeq_[peer * comms_ + index];
  Cts cts;
  cts.addr = reinterpret_cast<uintptr_t>(data);
  if ((info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) == 0) cts.addr -= handle->base;
  cts.key = fi_mr_key(handle->mr);
  cts.bytes = bytes;
  cts.reqId = static_cast<uint32_t>(req - pool_.data());
  cts.seq = seq;
  // Marked before the clear-to-send leaves: the write may complete within the next progress.
  req->awaitingWrite = true;
  req->posted = bytes;
  ssize_t rc = fi_tinject(endpoint_.ep(), &cts, sizeof(cts), peers_[peer],
                          kCtsTag | makeTag(rank_, index, seq));
  if (rc != 0) {
    req->awaitingWrite = false;
    giveRequest(req);
    return rc == -FI_EAGAIN ? progress() : fail("fi_tinject (clear-to-send)", static_cast<int>(rc));
  }
  ++seq;
  *request = req;
  return true;
}

}  // namespace nnf::perf
