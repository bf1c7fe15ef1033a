// SRD queue pairs: creation (efadv_create_qp_ex), state changes, receive posting, and the
// ibv_qp_ex work-request session (wr_start, the operation, its buffers and address, wr_complete)
// with the checks rdma-core's efa provider makes at post time. The device's work on what was
// posted is engine.cc's.
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "soft_efa.h"

namespace nnf::softefa {
namespace {

Qp* qpOf(ibv_qp_ex* ex) {
  return reinterpret_cast<Qp*>(ex);
}

Qp* qpOf(ibv_qp* qp) {
  return reinterpret_cast<Qp*>(qp);
}

uint32_t roundUpPow2(uint32_t value) {
  uint32_t out = 1;
  while (out < value) out <<= 1;
  return out;
}

// The first free QP number of the device (a slot whose owner died counts as free), 0 when none.
uint32_t claimQpn(uint32_t device, Qp* qp) {
  Registry& reg = registry();
  LockGuard guard(reg.lock);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t qpn = 1; qpn < kMaxQp; ++qpn) {
      QpSlot& slot = reg.qps[device][qpn];
      if (slot.live && (pass == 0 || processAlive(slot.pid))) continue;
      slot.live = 1;
      slot.pid = getpid();
      slot.qkey = 0;
      slot.pd = qp->pd->id;
      slot.flags = qp->unsolicited ? kQpUnsolicited : 0;
      slot.fileId = qp->ringId;
      slot.recvCqId = qp->recvCq->id;
      return qpn;
    }
  }
  return 0;
}

void publish(Qp* qp) {
  Registry& reg = registry();
  LockGuard guard(reg.lock);
  QpSlot& slot = reg.qps[qp->ctx->device->slot][qp->qpn];
  slot.qkey = qp->qkey;
  ibv_qp_state state = qp->ex.qp_base.state;
  bool ready = state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD;
  slot.flags = (qp->unsolicited ? kQpUnsolicited : 0) | (ready ? kQpReady : 0);
}

// --- the work-request session (rdma-core's checks, errors reported by wr_complete) ---

SendWqe* begin(ibv_qp_ex* ex, Op op) {
  Qp* qp = qpOf(ex);
  if (qp->sessionErr != 0) return nullptr;
  ibv_qp_state state = qp->ex.qp_base.state;
  if (state != IBV_QPS_RTS && state != IBV_QPS_SQD) {
    qp->sessionErr = EINVAL;
    return nullptr;
  }
  unsigned flags = ex->wr_flags;
  if ((!(flags & IBV_SEND_SIGNALED) && !qp->sqSigAll) ||
      (flags & ~static_cast<unsigned>(IBV_SEND_SIGNALED | IBV_SEND_INLINE))) {
    qp->sessionErr = EINVAL;  // EFA supports signaled work requests only
    return nullptr;
  }
  if (qp->sqOutstanding + qp->session.size() >= qp->maxSendWr) {
    qp->sessionErr = ENOMEM;  // the send queue is full until completions are polled
    return nullptr;
  }
  qp->session.emplace_back();
  SendWqe& wqe = qp->session.back();
  wqe.wrId = ex->wr_id;
  wqe.op = op;
  return &wqe;
}

SendWqe* current(ibv_qp_ex* ex) {
  Qp* qp = qpOf(ex);
  if (qp->sessionErr != 0 || qp->session.empty()) return nullptr;
  return &qp->session.back();
}

void wrSend(ibv_qp_ex* ex) {
  begin(ex, Op::kSend);
}

void wrSendImm(ibv_qp_ex* ex, __be32 imm) {
  if (SendWqe* wqe = begin(ex, Op::kSend)) {
    wqe->hasImm = true;
    wqe->imm = imm;
  }
}

void wrRead(ibv_qp_ex* ex, uint32_t rkey, uint64_t addr) {
  if (SendWqe* wqe = begin(ex, Op::kRead)) {
    wqe->rkey = rkey;
    wqe->remoteAddr = addr;
  }
}

void wrWrite(ibv_qp_ex* ex, uint32_t rkey, uint64_t addr) {
  if (SendWqe* wqe = begin(ex, Op::kWrite)) {
    wqe->rkey = rkey;
    wqe->remoteAddr = addr;
  }
}

void wrWriteImm(ibv_qp_ex* ex, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (SendWqe* wqe = begin(ex, Op::kWrite)) {
    wqe->rkey = rkey;
    wqe->remoteAddr = addr;
    wqe->hasImm = true;
    wqe->imm = imm;
  }
}

void wrSetSgeList(ibv_qp_ex* ex, size_t count, const ibv_sge* list) {
  SendWqe* wqe = current(ex);
  if (wqe == nullptr) return;
  Qp* qp = qpOf(ex);
  size_t limit = wqe->op == Op::kSend ? qp->maxSendSge : kMaxRdmaSge;
  if (count > limit) {
    qp->sessionErr = EINVAL;  // "num_sge > max_sge" (send) or "> max_rdma_sge" (RDMA)
    return;
  }
  wqe->isInline = false;
  wqe->numSge = static_cast<uint32_t>(count);
  wqe->length = 0;
  for (size_t i = 0; i < count; ++i) {
    wqe->sge[i] = list[i];
    wqe->length += list[i].length;
  }
}

void wrSetSge(ibv_qp_ex* ex, uint32_t lkey, uint64_t addr, uint32_t length) {
  ibv_sge sge = {addr, length, lkey};
  wrSetSgeList(ex, 1, &sge);
}

void wrSetInlineDataList(ibv_qp_ex* ex, size_t count, const ibv_data_buf* list) {
  SendWqe* wqe = current(ex);
  if (wqe == nullptr) return;
  Qp* qp = qpOf(ex);
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) total += list[i].length;
  if (total > qp->maxInline || wqe->op != Op::kSend) {
    qp->sessionErr = EINVAL;
    return;
  }
  // Inline data is copied now by the CPU (the caller may reuse its buffers at once): a buffer of
  // GPU memory faults here, as it would in rdma-core.
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(wqe->inlineData.data() + at, list[i].addr, list[i].length);
    at += list[i].length;
  }
  wqe->isInline = true;
  wqe->numSge = 0;
  wqe->length = total;
}

void wrSetInlineData(ibv_qp_ex* ex, void* addr, size_t length) {
  ibv_data_buf buf = {addr, length};
  wrSetInlineDataList(ex, 1, &buf);
}

void wrSetUdAddr(ibv_qp_ex* ex, ibv_ah* ah, uint32_t qpn, uint32_t qkey) {
  SendWqe* wqe = current(ex);
  if (wqe == nullptr) return;
  wqe->ah = reinterpret_cast<Ah*>(ah);
  wqe->remoteQpn = qpn;
  wqe->remoteQkey = qkey;
}

void wrStart(ibv_qp_ex* ex) {
  Qp* qp = qpOf(ex);
  qp->sessionErr = 0;
  qp->session.clear();
}

// Where a write or read is cut into pieces that land in any order (in address order when the
// device promises 128-byte in-order writes).
void cutIntoPieces(Process& proc, SendWqe& wqe) {
  wqe.pieces = 1;
  wqe.cuts[0] = 0;
  wqe.cuts[1] = wqe.length;
  wqe.order[0] = 0;
  constexpr uint64_t kMinPiece = 4096;
  if (!config().reorder || wqe.op == Op::kSend || wqe.length < 2 * kMinPiece) return;
  uint64_t pieces = 1 + nextRandom(proc) % 4;
  pieces = std::min<uint64_t>(pieces, wqe.length / kMinPiece);
  wqe.pieces = static_cast<uint8_t>(pieces);
  for (uint64_t i = 1; i < pieces; ++i) {
    uint64_t cut = wqe.length * i / pieces;
    wqe.cuts[i] = cut - cut % 128;  // 128-byte aligned, as the in-order promise is stated
  }
  wqe.cuts[pieces] = wqe.length;
  for (uint64_t i = 0; i < pieces; ++i) wqe.order[i] = static_cast<uint8_t>(i);
  if (config().inOrder128 && wqe.op == Op::kWrite) return;
  for (uint64_t i = pieces - 1; i > 0; --i)
    std::swap(wqe.order[i], wqe.order[nextRandom(proc) % (i + 1)]);
}

int wrComplete(ibv_qp_ex* ex) {
  Qp* qp = qpOf(ex);
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  if (qp->sessionErr != 0) {
    qp->session.clear();
    return qp->sessionErr;
  }
  for (SendWqe& wqe : qp->session) {
    // Delays: a message may wait a few progress passes while later ones go ahead.
    wqe.hold = config().reorder ? static_cast<uint32_t>(nextRandom(proc) % 3) : 0;
    cutIntoPieces(proc, wqe);
    // Posted while its link or its target's is down: it fails whatever comes after (link.cc),
    // checked before this post counts for the schedules.
    uint32_t link = linkFailure(*qp, wqe, true);
    if (link != kOk) {
      wqe.status = link;
      wqe.phase = SendWqe::kComplete;
    }
    qp->pending.push_back(wqe);
    noteLinkPost(*qp);
  }
  qp->sqOutstanding += static_cast<uint32_t>(qp->session.size());
  qp->session.clear();
  progress(proc);
  kick(proc);
  return 0;
}

void wrAbort(ibv_qp_ex* ex) {
  qpOf(ex)->session.clear();
}

}  // namespace

int postRecv(ibv_qp* ibvQp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp* qp = qpOf(ibvQp);
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  QpRing* ring = qp->ring;
  for (; wr != nullptr; wr = wr->next) {
    int err = 0;
    ibv_qp_state state = qp->ex.qp_base.state;
    if (state == IBV_QPS_RESET || state == IBV_QPS_ERR)
      err = EINVAL;
    else if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->maxRecvSge)
      err = EINVAL;
    else if (qp->rqOutstanding >= ring->capacity)
      err = ENOMEM;
    if (err != 0) {
      if (std::getenv("NNF_SOFT_EFA_TRACE") != nullptr)
        std::fprintf(stderr,
                     "soft-efa %d: post_recv on qp %u refused (%d): state %d, %u posted, "
                     "ring head %u tail %u\n",
                     static_cast<int>(getpid()), qp->qpn, err, static_cast<int>(state),
                     qp->rqOutstanding, ring->head.load(), ring->tail.load());
      *bad = wr;
      return err;
    }
    uint32_t tail = ring->tail.load(std::memory_order_relaxed);
    RqEntry& entry = ring->ring[tail & (ring->capacity - 1)];
    entry.wrId = wr->wr_id;
    entry.numSge = static_cast<uint32_t>(wr->num_sge);
    for (int i = 0; i < wr->num_sge; ++i) entry.sge[i] = wr->sg_list[i];
    ring->tail.store(tail + 1, std::memory_order_release);
    ++qp->rqOutstanding;
  }
  return 0;
}

Qp* createQp(Context* ctx, ibv_qp_init_attr_ex* attr, const efadv_qp_init_attr* dv) {
  const Config& cfg = config();
  uint64_t supported = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  if (cfg.rdmaRead) supported |= IBV_QP_EX_WITH_RDMA_READ;
  if (cfg.rdmaWrite) supported |= IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
  uint64_t ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? attr->send_ops_flags : 0;
  if (attr->qp_type != IBV_QPT_DRIVER || dv->driver_qp_type != EFADV_QP_DRIVER_TYPE_SRD ||
      !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || (ops & ~supported) ||
      ((dv->flags & EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV) && !cfg.unsolicitedWrite) ||
      (dv->flags & ~static_cast<uint16_t>(EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const ibv_qp_cap& cap = attr->cap;
  if (cap.max_send_wr > kMaxSqWr || cap.max_recv_wr > kMaxRqWr || cap.max_send_sge > kMaxSqSge ||
      cap.max_recv_sge > kMaxRqSge || cap.max_inline_data > kInlineSize ||
      attr->send_cq == nullptr || attr->recv_cq == nullptr || attr->pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = new Qp();
  qp->ctx = ctx;
  qp->pd = reinterpret_cast<Pd*>(attr->pd);
  qp->sendCq = reinterpret_cast<Cq*>(attr->send_cq);
  qp->recvCq = reinterpret_cast<Cq*>(attr->recv_cq);
  qp->unsolicited = (dv->flags & EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV) != 0;
  qp->sqSigAll = attr->sq_sig_all != 0;
  qp->sendOps = ops;
  qp->maxSendWr = std::max<uint32_t>(cap.max_send_wr, 1);
  qp->maxRecvWr = std::max<uint32_t>(cap.max_recv_wr, 1);
  qp->maxSendSge = std::max<uint32_t>(cap.max_send_sge, 1);
  qp->maxRecvSge = std::max<uint32_t>(cap.max_recv_sge, 1);
  qp->maxInline = cap.max_inline_data;
  qp->owner = getpid();
  uint32_t capacity = roundUpPow2(qp->maxRecvWr);
  qp->ringId = newId();
  qp->ringSize = qpRingSize(capacity);
  qp->ring = static_cast<QpRing*>(createShared(qp->ringId, qp->ringSize));
  if (qp->ring == nullptr) {
    delete qp;
    return nullptr;
  }
  qp->ring->lock.init();
  qp->ring->capacity = capacity;
  qp->ring->pid = getpid();
  qp->ring->live.store(1, std::memory_order_release);
  qp->ring->magic = kQpRingMagic;
  qp->qpn = claimQpn(ctx->device->slot, qp);
  if (qp->qpn == 0) {
    removeShared(qp->ringId, qp->ring, qp->ringSize);
    delete qp;
    errno = ENOMEM;
    return nullptr;
  }

  ibv_qp& base = qp->ex.qp_base;
  base.context = &ctx->vctx.context;
  base.qp_context = attr->qp_context;
  base.pd = attr->pd;
  base.send_cq = attr->send_cq;
  base.recv_cq = attr->recv_cq;
  base.handle = qp->qpn;
  base.qp_num = qp->qpn;
  base.state = IBV_QPS_RESET;
  base.qp_type = IBV_QPT_DRIVER;
  pthread_mutex_init(&base.mutex, nullptr);
  pthread_cond_init(&base.cond, nullptr);
  ibv_qp_ex& ex = qp->ex;
  ex.comp_mask = 0;
  // Only the operations asked for get a function, as in rdma-core.
  if (ops & IBV_QP_EX_WITH_SEND) ex.wr_send = wrSend;
  if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM) ex.wr_send_imm = wrSendImm;
  if (ops & IBV_QP_EX_WITH_RDMA_READ) ex.wr_rdma_read = wrRead;
  if (ops & IBV_QP_EX_WITH_RDMA_WRITE) ex.wr_rdma_write = wrWrite;
  if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) ex.wr_rdma_write_imm = wrWriteImm;
  ex.wr_set_ud_addr = wrSetUdAddr;
  ex.wr_set_inline_data = wrSetInlineData;
  ex.wr_set_inline_data_list = wrSetInlineDataList;
  ex.wr_set_sge = wrSetSge;
  ex.wr_set_sge_list = wrSetSgeList;
  ex.wr_start = wrStart;
  ex.wr_complete = wrComplete;
  ex.wr_abort = wrAbort;

  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  proc.qps.push_back(qp);
  return qp;
}

void* mapRemote(Process& proc, uint64_t id) {
  auto found = proc.remotes.find(id);
  if (found != proc.remotes.end()) return found->second.first;
  if (proc.remotes.size() >= 4096) {
    // Peers come and go (tests open thousands of comms over a run): start the cache afresh.
    for (auto& [key, mapping] : proc.remotes) munmap(mapping.first, mapping.second);
    proc.remotes.clear();
  }
  size_t size = 0;
  void* base = openShared(id, &size);
  if (base == nullptr) return nullptr;
  proc.remotes[id] = {base, size};
  return base;
}

void unmapRemote(Process& proc, uint64_t id) {
  auto found = proc.remotes.find(id);
  if (found == proc.remotes.end()) return;
  munmap(found->second.first, found->second.second);
  proc.remotes.erase(found);
}

}  // namespace nnf::softefa

using namespace nnf::softefa;

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT ibv_qp* nnf_soft_efa_create_qp(ibv_context* context, ibv_qp_init_attr_ex* attr,
                                      efadv_qp_init_attr* dv, uint32_t inlen) {
  if (inlen < offsetof(efadv_qp_init_attr, flags) + sizeof(dv->flags)) {
    errno = EINVAL;
    return nullptr;
  }
  Qp* qp = createQp(contextOf(context), attr, dv);
  return qp != nullptr ? &qp->ex.qp_base : nullptr;
}

EXPORT ibv_qp* ibv_create_qp(ibv_pd*, ibv_qp_init_attr*) {
  errno = EOPNOTSUPP;  // SRD queue pairs come from efadv_create_qp_ex
  return nullptr;
}

EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  return &reinterpret_cast<Qp*>(qp)->ex;
}

EXPORT int ibv_modify_qp(ibv_qp* ibvQp, ibv_qp_attr* attr, int mask) {
  Qp* qp = reinterpret_cast<Qp*>(ibvQp);
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  if (mask & IBV_QP_QKEY) qp->qkey = attr->qkey;
  if (mask & IBV_QP_RNR_RETRY) qp->rnrRetry = attr->rnr_retry;
  if (mask & IBV_QP_PORT && attr->port_num != 1) return EINVAL;
  if (mask & IBV_QP_STATE) ibvQp->state = attr->qp_state;
  publish(qp);
  return 0;
}

EXPORT int ibv_query_qp(ibv_qp* ibvQp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  Qp* qp = reinterpret_cast<Qp*>(ibvQp);
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = ibvQp->state;
  attr->qkey = qp->qkey;
  attr->rnr_retry = qp->rnrRetry;
  attr->port_num = 1;
  attr->cap = {qp->maxSendWr, qp->maxRecvWr, qp->maxSendSge, qp->maxRecvSge, qp->maxInline};
  if (init != nullptr) {
    std::memset(init, 0, sizeof(*init));
    init->send_cq = ibvQp->send_cq;
    init->recv_cq = ibvQp->recv_cq;
    init->cap = attr->cap;
    init->qp_type = ibvQp->qp_type;
    init->sq_sig_all = qp->sqSigAll;
  }
  return 0;
}

EXPORT int ibv_destroy_qp(ibv_qp* ibvQp) {
  Qp* qp = reinterpret_cast<Qp*>(ibvQp);
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  proc.qps.erase(std::remove(proc.qps.begin(), proc.qps.end(), qp), proc.qps.end());
  {
    Registry& reg = registry();
    LockGuard lock(reg.lock);
    QpSlot& slot = reg.qps[qp->ctx->device->slot][qp->qpn];
    if (slot.fileId == qp->ringId) slot.live = 0;
  }
  {
    LockGuard lock(qp->ring->lock);
    qp->ring->live.store(0, std::memory_order_release);
  }
  removeShared(qp->ringId, qp->ring, qp->ringSize);
  pthread_mutex_destroy(&ibvQp->mutex);
  pthread_cond_destroy(&ibvQp->cond);
  delete qp;
  return 0;
}

EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t flags) {
  // As rdma-core's efa: the device's 128-byte data-polling capability, for every operation.
  if (!(flags & IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS)) return 0;
  return config().inOrder128 ? IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES : 0;
}
