// Extended completion queues: a ring in shared memory that any process's device work pushes
// into and only the owner polls, read through the ibv_cq_ex and efadv_cq function pointers.
#include <errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "soft_efa.h"

namespace nnf::softefa {
namespace {

Cq* cqOf(ibv_cq_ex* ex) {
  return reinterpret_cast<Cq*>(ex);
}

Cq* cqOf(efadv_cq* dv) {
  return reinterpret_cast<Cq*>(reinterpret_cast<char*>(dv) - offsetof(Cq, dv));
}

uint32_t roundUpPow2(uint32_t value) {
  uint32_t out = 1;
  while (out < value) out <<= 1;
  return out;
}

// Makes the ring's next completion current; ENOENT when there is none.
int popCurrent(Cq* cq) {
  CqRing* ring = cq->ring;
  uint32_t head = ring->head.load(std::memory_order_relaxed);
  if (head == ring->tail.load(std::memory_order_acquire)) return ENOENT;
  cq->cur = ring->ring[head & (ring->capacity - 1)];
  ring->head.store(head + 1, std::memory_order_release);
  cq->ex.wr_id = cq->cur.wrId;
  cq->ex.status = wcStatus(cq->cur.vendorErr);
  static const bool trace = [] {
    const char* env = std::getenv("NNF_SOFT_EFA_TRACE");
    return env != nullptr && *env == '1';
  }();
  if (trace)
    std::fprintf(stderr, "soft-efa %d: polled qp %u opcode %u len %u flags %u status %u src %u\n",
                 static_cast<int>(getpid()), cq->cur.qpNum, cq->cur.opcode, cq->cur.byteLen,
                 cq->cur.flags, cq->cur.vendorErr, cq->cur.srcQp);
  onPolled(process(), *cq, cq->cur);
  return 0;
}

int startPoll(ibv_cq_ex* ex, ibv_poll_cq_attr* attr) {
  if (attr->comp_mask != 0) return EINVAL;  // as rdma-core's efa
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  // A process that only waits still publishes its links' changes: a NIC's link does not wait
  // for its host to send (its peers' operations to it fail meanwhile).
  refreshLinks();
  progress(proc);
  return popCurrent(cqOf(ex));
}

int nextPoll(ibv_cq_ex* ex) {
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  return popCurrent(cqOf(ex));
}

void endPoll(ibv_cq_ex*) {}

ibv_wc_opcode readOpcode(ibv_cq_ex* ex) {
  return static_cast<ibv_wc_opcode>(cqOf(ex)->cur.opcode);
}

uint32_t readVendorErr(ibv_cq_ex* ex) {
  return cqOf(ex)->cur.vendorErr;
}

uint32_t readByteLen(ibv_cq_ex* ex) {
  const Cqe& cqe = cqOf(ex)->cur;
  return (cqe.flags & kCqeRecv) ? cqe.byteLen : 0;  // send-queue completions carry no length
}

__be32 readImmData(ibv_cq_ex* ex) {
  return cqOf(ex)->cur.imm;
}

uint32_t readQpNum(ibv_cq_ex* ex) {
  return cqOf(ex)->cur.qpNum;
}

uint32_t readSrcQp(ibv_cq_ex* ex) {
  return cqOf(ex)->cur.srcQp;
}

unsigned readWcFlags(ibv_cq_ex* ex) {
  return (cqOf(ex)->cur.flags & kCqeImm) ? IBV_WC_WITH_IMM : 0;
}

// The AH number this process's device gave the sender's GID, as EFA reports it; 0xffff when
// there is none, and then the GID itself is readable (efadv_wc_read_sgid).
uint16_t slidOf(Cq* cq) {
  std::array<uint8_t, 16> gid;
  std::memcpy(gid.data(), cq->cur.sgid, gid.size());
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  auto found = cq->ctx->ahs.find(gid);
  return found != cq->ctx->ahs.end() ? found->second.first : kUnknownAh;
}

uint32_t readSlid(ibv_cq_ex* ex) {
  Cq* cq = cqOf(ex);
  return (cq->cur.flags & kCqeRecv) ? slidOf(cq) : 0;
}

uint8_t readZero8(ibv_cq_ex*) {
  return 0;
}

int readSgid(efadv_cq* dv, ibv_gid* sgid) {
  Cq* cq = cqOf(dv);
  if (slidOf(cq) != kUnknownAh) return -ENOENT;  // only for a sender without an AH here
  std::memcpy(sgid->raw, cq->cur.sgid, sizeof(sgid->raw));
  return 0;
}

bool isUnsolicited(efadv_cq* dv) {
  return (cqOf(dv)->cur.flags & kCqeUnsolicited) != 0;
}

}  // namespace

Cq* createCq(Context* ctx, int cqe, uint64_t wcFlags, uint64_t dvFlags) {
  if (cqe <= 0 || static_cast<uint32_t>(cqe) > kMaxCqe) {
    errno = EINVAL;
    return nullptr;
  }
  uint32_t capacity = roundUpPow2(std::max<uint32_t>(static_cast<uint32_t>(cqe), 4096));
  auto* cq = new Cq();
  cq->ctx = ctx;
  cq->id = newId();
  cq->ringSize = cqRingSize(capacity);
  cq->ring = static_cast<CqRing*>(createShared(cq->id, cq->ringSize));
  if (cq->ring == nullptr) {
    delete cq;
    return nullptr;
  }
  cq->ring->lock.init();
  cq->ring->capacity = capacity;
  cq->ring->pid = getpid();
  cq->ring->live.store(1, std::memory_order_release);
  cq->ring->magic = kCqRingMagic;

  ibv_cq_ex& ex = cq->ex;
  ex.context = &ctx->vctx.context;
  ex.cqe = cqe;
  ex.handle = static_cast<uint32_t>(cq->id);
  pthread_mutex_init(&ex.mutex, nullptr);
  pthread_cond_init(&ex.cond, nullptr);
  ex.start_poll = startPoll;
  ex.next_poll = nextPoll;
  ex.end_poll = endPoll;
  ex.read_opcode = readOpcode;
  ex.read_vendor_err = readVendorErr;
  ex.read_byte_len = readByteLen;
  ex.read_imm_data = readImmData;
  ex.read_qp_num = readQpNum;
  ex.read_src_qp = readSrcQp;
  ex.read_wc_flags = readWcFlags;
  ex.read_slid = readSlid;
  ex.read_sl = readZero8;
  ex.read_dlid_path_bits = readZero8;
  cq->dv.comp_mask = 0;
  if (dvFlags & EFADV_WC_EX_WITH_SGID) cq->dv.wc_read_sgid = readSgid;
  if (dvFlags & EFADV_WC_EX_WITH_IS_UNSOLICITED) cq->dv.wc_is_unsolicited = isUnsolicited;
  (void)wcFlags;
  return cq;
}

int destroyCq(Cq* cq) {
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  for (Qp* qp : proc.qps)
    if (qp->sendCq == cq || qp->recvCq == cq) return EBUSY;
  {
    LockGuard ring(cq->ring->lock);
    cq->ring->live.store(0, std::memory_order_release);
  }
  removeShared(cq->id, cq->ring, cq->ringSize);
  pthread_mutex_destroy(&cq->ex.mutex);
  pthread_cond_destroy(&cq->ex.cond);
  delete cq;
  return 0;
}

ibv_wc_status wcStatus(uint32_t status) {
  // As rdma-core's efa provider maps its completion statuses.
  switch (status) {
    case kOk:
      return IBV_WC_SUCCESS;
    case kFlushed:
      return IBV_WC_WR_FLUSH_ERR;
    case kLocalQpInternal:
    case kLocalUnsupportedOp:
    case kLocalInvalidAh:
      return IBV_WC_LOC_QP_OP_ERR;
    case kLocalInvalidLkey:
      return IBV_WC_LOC_PROT_ERR;
    case kLocalBadLength:
      return IBV_WC_LOC_LEN_ERR;
    case kRemoteAbort:
      return IBV_WC_REM_ABORT_ERR;
    case kRemoteRnr:
      return IBV_WC_RNR_RETRY_EXC_ERR;
    case kRemoteBadDestQpn:
      return IBV_WC_REM_INV_RD_REQ_ERR;
    case kRemoteBadStatus:
      return IBV_WC_BAD_RESP_ERR;
    case kRemoteBadLength:
      return IBV_WC_REM_INV_REQ_ERR;
    case kLocalUnresponsiveRemote:
    case kLocalUnreachableRemote:
      return IBV_WC_RESP_TIMEOUT_ERR;
    case kRemoteBadAddress:
      return IBV_WC_REM_ACCESS_ERR;
    case kRemoteUnknownPeer:
      return IBV_WC_REM_OP_ERR;
    default:
      return IBV_WC_GENERAL_ERR;
  }
}

}  // namespace nnf::softefa

using namespace nnf::softefa;

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  return destroyCq(reinterpret_cast<Cq*>(cq));
}

EXPORT ibv_cq_ex* nnf_soft_efa_create_cq(ibv_context* context, ibv_cq_init_attr_ex* attr,
                                         efadv_cq_init_attr* dv, uint32_t inlen) {
  if (attr->comp_mask != 0 || (attr->wc_flags & ~static_cast<uint64_t>(IBV_WC_STANDARD_FLAGS)) ||
      inlen < sizeof(efadv_cq_init_attr) || dv->comp_mask != 0 ||
      (dv->wc_flags &
       ~static_cast<uint64_t>(EFADV_WC_EX_WITH_SGID | EFADV_WC_EX_WITH_IS_UNSOLICITED))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Cq* cq = createCq(contextOf(context), static_cast<int>(attr->cqe), attr->wc_flags, dv->wc_flags);
  return cq != nullptr ? &cq->ex : nullptr;
}

EXPORT efadv_cq* nnf_soft_efa_dv_cq(ibv_cq_ex* ex) {
  return &reinterpret_cast<Cq*>(ex)->dv;
}
