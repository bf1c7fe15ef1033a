// The device's work, done by the sending process whenever it calls into the device (posting or
// polling): each pending operation of its queue pairs takes one step per pass, in a seeded
// random order, some after a delay; a large write or read lands in pieces in random order. A
// send takes a receive from the target's ring and writes into its buffers; a write or read goes
// straight to the target's registered memory (process_vm_writev/readv); the target's completion
// is pushed into its completion ring, ours into ours. What SRD refuses is refused here with the
// completion status EFA reports.
#include <pthread.h>
#include <sched.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>

#include "soft_efa.h"

namespace nnf::softefa {
namespace {

struct Target {
  int pid = 0;
  uint32_t device = 0;
  uint32_t pd = 0;
  uint32_t flags = 0;
  QpRing* ring = nullptr;
  CqRing* cq = nullptr;
};

enum class Step { kPending, kFinished };

void writeStatsAtExit() {
  if (!config().stats.empty()) writeStats();
}

void lockForFork() {
  process().mutex.lock();
}
void unlockAfterFork() {
  process().mutex.unlock();
}
void unlockInChild() {
  Process& proc = process();
  proc.threadPid = 0;  // threads do not survive fork: the child starts its own when it posts
  proc.rng ^= static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ull;
  proc.traffic.clear();  // the parent's bytes are the parent's
  proc.mutex.unlock();
}

Process* makeProcess() {
  auto* proc = new Process();  // never destroyed: exit handlers may still poll
  proc->rng = config().seed * 0x2545f4914f6cdd1dull ^ static_cast<uint64_t>(getpid());
  pthread_atfork(lockForFork, unlockAfterFork, unlockInChild);
  std::atexit(writeStatsAtExit);
  return proc;
}

Step fail(SendWqe& wqe, uint32_t status) {
  wqe.status = status;
  wqe.phase = SendWqe::kComplete;
  return Step::kPending;  // the caller goes on to the completion at once
}

// What the operation's remote queue pair is, checked as SRD checks it.
uint32_t resolve(Process& proc, const SendWqe& wqe, Target* target) {
  if (wqe.ah == nullptr) return kLocalInvalidAh;
  if (wqe.ah->target < 0) return kLocalUnreachableRemote;
  if (wqe.remoteQpn == 0 || wqe.remoteQpn >= kMaxQp) return kRemoteBadDestQpn;
  QpSlot slot;
  {
    Registry& reg = registry();
    LockGuard guard(reg.lock);
    slot = reg.qps[wqe.ah->target][wqe.remoteQpn];
  }
  if (!slot.live || !(slot.flags & kQpReady) || slot.qkey != wqe.remoteQkey)
    return kRemoteBadDestQpn;
  target->pid = slot.pid;
  target->device = static_cast<uint32_t>(wqe.ah->target);
  target->pd = slot.pd;
  target->flags = slot.flags;
  target->ring = static_cast<QpRing*>(mapRemote(proc, slot.fileId));
  target->cq = static_cast<CqRing*>(mapRemote(proc, slot.recvCqId));
  if (target->ring == nullptr || target->cq == nullptr) return kRemoteBadDestQpn;
  if (target->ring->live.load(std::memory_order_acquire) == 0 ||
      target->cq->live.load(std::memory_order_acquire) == 0) {
    unmapRemote(proc, slot.fileId);
    unmapRemote(proc, slot.recvCqId);
    return kRemoteBadDestQpn;
  }
  return kOk;
}

// The local buffers as this process's CPU addresses; false when a key does not cover them.
bool localIov(const Qp& qp, SendWqe& wqe, uint32_t access, iovec* iov, size_t* count) {
  if (wqe.isInline) {
    iov[0] = {wqe.inlineData.data(), wqe.length};
    *count = wqe.length > 0 ? 1 : 0;
    return true;
  }
  *count = 0;
  for (uint32_t i = 0; i < wqe.numSge; ++i) {
    const ibv_sge& sge = wqe.sge[i];
    if (sge.length == 0) continue;
    uint64_t cpu = translate(sge.lkey, sge.addr, sge.length, getpid(), qp.ctx->device->slot,
                             qp.pd->id, access);
    if (cpu == 0) return false;
    iov[(*count)++] = {reinterpret_cast<void*>(cpu), sge.length};
  }
  return true;
}

// Cuts an iov list to [from, from+length).
size_t slice(const iovec* in, size_t count, uint64_t from, uint64_t length, iovec* out) {
  size_t n = 0;
  for (size_t i = 0; i < count && length > 0; ++i) {
    if (from >= in[i].iov_len) {
      from -= in[i].iov_len;
      continue;
    }
    uint64_t take = std::min<uint64_t>(in[i].iov_len - from, length);
    out[n++] = {static_cast<char*>(in[i].iov_base) + from, take};
    length -= take;
    from = 0;
  }
  return n;
}

uint32_t copyFailure(int pid) {
  // The peer's process is gone, and with it (the kernel destroys a dead process's queue pairs)
  // the queue pair: its NIC answers "bad destination QP"; or memory behind a key is unmapped.
  return errno == ESRCH || !processAlive(pid) ? kRemoteBadDestQpn : kRemoteBadAddress;
}

// No receive is posted at the target: SRD retries rnr_retry times (7: for ever), then reports
// receiver-not-ready; a target whose process died has no queue pair any more.
Step receiverNotReady(const Qp& qp, SendWqe& wqe, const Target& target, uint64_t now) {
  if (!processAlive(target.pid)) return fail(wqe, kRemoteBadDestQpn);
  if (qp.rnrRetry != kInfiniteRnrRetry && wqe.rnrTries >= qp.rnrRetry) return fail(wqe, kRemoteRnr);
  ++wqe.rnrTries;
  wqe.retryAtNs = now + static_cast<uint64_t>(config().rnrIntervalUs) * 1000;
  return Step::kPending;
}

// Takes the target's next receive for a message of `length` bytes into `remote` (its buffers as
// the target's CPU addresses). kOk, kRemoteRnr (none posted: retry), or an error status.
uint32_t takeReceive(const Target& target, uint64_t length, uint64_t* wrId, iovec* remote,
                     size_t* count) {
  LockGuard guard(target.ring->lock);
  QpRing* ring = target.ring;
  uint32_t head = ring->head.load(std::memory_order_relaxed);
  if (head == ring->tail.load(std::memory_order_acquire)) return kRemoteRnr;
  const RqEntry& entry = ring->ring[head & (ring->capacity - 1)];
  uint64_t room = 0;
  *count = 0;
  for (uint32_t i = 0; i < entry.numSge && i < kMaxRqSge; ++i) {
    const ibv_sge& sge = entry.sge[i];
    room += sge.length;
    if (sge.length == 0) continue;
    uint64_t cpu = translate(sge.lkey, sge.addr, sge.length, target.pid, target.device, target.pd,
                             IBV_ACCESS_LOCAL_WRITE);
    if (cpu == 0) return kRemoteBadStatus;  // the receiver's own buffer is not registered
    remote[(*count)++] = {reinterpret_cast<void*>(cpu), sge.length};
  }
  if (room < length) return kRemoteBadLength;  // left posted: the message does not fit
  *wrId = entry.wrId;
  ring->head.store(head + 1, std::memory_order_release);
  return kOk;
}

Cqe remoteCqe(const Qp& qp, const SendWqe& wqe, uint32_t opcode) {
  Cqe cqe{};
  cqe.opcode = opcode;
  cqe.byteLen = static_cast<uint32_t>(wqe.length);
  cqe.flags = kCqeRecv | (wqe.hasImm ? kCqeImm : 0);
  cqe.imm = wqe.imm;
  cqe.qpNum = wqe.remoteQpn;
  cqe.srcQp = qp.qpn;
  std::memcpy(cqe.sgid, qp.ctx->device->gid.raw, sizeof(cqe.sgid));
  return cqe;
}

Step stepSend(Process& proc, Qp& qp, SendWqe& wqe, const Target& target, uint64_t now) {
  iovec local[kMaxSqSge], remote[kMaxRqSge];
  size_t nLocal = 0, nRemote = 0;
  if (!localIov(qp, wqe, 0, local, &nLocal)) return fail(wqe, kLocalInvalidLkey);
  uint64_t wrId = 0;
  uint32_t status = takeReceive(target, wqe.length, &wrId, remote, &nRemote);
  if (status == kRemoteRnr) return receiverNotReady(qp, wqe, target, now);
  if (status != kOk) return fail(wqe, status);
  iovec to[kMaxRqSge + kMaxSqSge];
  size_t nTo = slice(remote, nRemote, 0, wqe.length, to);
  if (wqe.length > 0 && !copyTo(target.pid, local, nLocal, to, nTo))
    return fail(wqe, copyFailure(target.pid));
  proc.traffic[qp.ctx->device->slot][1] += wqe.length;
  ++proc.moves;
  wqe.owed = remoteCqe(qp, wqe, IBV_WC_RECV);
  wqe.owed.wrId = wrId;
  wqe.haveReceive = true;
  wqe.phase = SendWqe::kDeliver;
  return Step::kPending;
}

Step stepRma(Process& proc, Qp& qp, SendWqe& wqe, const Target& target, uint64_t now) {
  bool write = wqe.op == Op::kWrite;
  bool solicited = write && wqe.hasImm && !(target.flags & kQpUnsolicited);
  if (wqe.done == 0 && solicited) {
    // A write with immediate data into a queue pair without unsolicited receive needs a posted
    // receive: none, and it is refused before any byte lands.
    QpRing* ring = target.ring;
    if (ring->head.load(std::memory_order_acquire) == ring->tail.load(std::memory_order_acquire))
      return receiverNotReady(qp, wqe, target, now);
  }
  uint64_t remote = translate(wqe.rkey, wqe.remoteAddr, wqe.length, target.pid, target.device,
                              target.pd, write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ);
  if (remote == 0 && wqe.length > 0) return fail(wqe, kRemoteBadAddress);
  iovec local[kMaxSqSge];
  size_t nLocal = 0;
  if (!localIov(qp, wqe, write ? 0 : IBV_ACCESS_LOCAL_WRITE, local, &nLocal))
    return fail(wqe, kLocalInvalidLkey);
  if (wqe.length > 0) {
    uint8_t piece = wqe.order[wqe.done];
    uint64_t from = wqe.cuts[piece], length = wqe.cuts[piece + 1] - from;
    iovec mine[kMaxSqSge];
    size_t nMine = slice(local, nLocal, from, length, mine);
    iovec theirs = {reinterpret_cast<void*>(remote + from), length};
    bool ok = write ? copyTo(target.pid, mine, nMine, &theirs, 1)
                    : copyFrom(target.pid, mine, nMine, &theirs, 1);
    if (!ok) return fail(wqe, copyFailure(target.pid));
    ++proc.moves;
  }
  if (++wqe.done < wqe.pieces) return Step::kPending;  // the next piece in a later pass
  proc.traffic[qp.ctx->device->slot][write ? 0 : 2] += wqe.length;
  if (write && wqe.hasImm) {
    wqe.owed = remoteCqe(qp, wqe, IBV_WC_RECV_RDMA_WITH_IMM);
    if (!solicited) wqe.owed.flags |= kCqeUnsolicited;
    wqe.haveReceive = !solicited;  // solicited: the receive is taken at delivery
    wqe.phase = SendWqe::kDeliver;
  } else {
    wqe.phase = SendWqe::kComplete;
  }
  return Step::kPending;
}

Step deliver(Process& proc, Qp& qp, SendWqe& wqe, const Target& target, uint64_t now) {
  if (!wqe.haveReceive) {
    uint64_t wrId = 0;
    iovec unused[kMaxRqSge];
    size_t count = 0;
    uint32_t status = takeReceive(target, 0, &wrId, unused, &count);
    if (status == kRemoteRnr) return receiverNotReady(qp, wqe, target, now);
    if (status != kOk) return fail(wqe, status);
    wqe.owed.wrId = wrId;
    wqe.haveReceive = true;
  }
  if (!pushCqe(target.cq, wqe.owed)) {
    if (target.cq->live.load(std::memory_order_acquire) == 0) return fail(wqe, kRemoteBadDestQpn);
    return Step::kPending;  // the target's ring is full: its owner will poll
  }
  ++proc.moves;
  wqe.phase = SendWqe::kComplete;
  return Step::kPending;
}

// NNF_SOFT_EFA_TRACE=1: one line per operation completed at the sender, for debugging.
void trace(const Qp& qp, const SendWqe& wqe) {
  static const bool on = [] {
    const char* env = std::getenv("NNF_SOFT_EFA_TRACE");
    return env != nullptr && *env == '1';
  }();
  if (!on) return;
  static const char* const kOps[] = {"send", "write", "read"};
  std::fprintf(stderr, "soft-efa %d: %s qp %u %s %llu bytes%s to qp %u: status %u\n",
               static_cast<int>(getpid()), qp.ctx->device->ibv.name, qp.qpn,
               kOps[static_cast<int>(wqe.op)], static_cast<unsigned long long>(wqe.length),
               wqe.hasImm ? " +imm" : "", wqe.remoteQpn, wqe.status);
}

bool complete(const Qp& qp, const SendWqe& wqe) {
  Cqe cqe{};
  cqe.wrId = wqe.wrId;
  cqe.vendorErr = wqe.status;
  // As rdma-core's efa reports send-queue completions: RDMA_WRITE for writes, SEND otherwise
  // (reads included).
  cqe.opcode = wqe.op == Op::kWrite ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
  cqe.qpNum = qp.qpn;
  if (!pushCqe(qp.sendCq->ring, cqe)) return false;
  trace(qp, wqe);
  return true;
}

Step step(Process& proc, Qp& qp, SendWqe& wqe, uint64_t now) {
  for (;;) {
    // A link that went down fails the operation wherever it is, even between the target's
    // completion and ours (link.cc).
    if (wqe.status == kOk) {
      uint32_t link = linkFailure(qp, wqe, false);
      if (link != kOk) fail(wqe, link);
    }
    // A silent link holds it where it is, completion and all, for as long as it stays silent;
    // then it fails (SRD gave up on it meanwhile).
    if (wqe.status == kOk && linkSilent(qp, wqe)) {
      if (!wqe.silenced) wqe.silencedAtNs = now;
      wqe.silenced = true;
      if (now - wqe.silencedAtNs < config().silentGiveUpMs * 1000000) return Step::kPending;
    }
    if (wqe.silenced && wqe.status == kOk) fail(wqe, kLocalUnresponsiveRemote);
    if (wqe.phase == SendWqe::kComplete) {
      if (!complete(qp, wqe)) return Step::kPending;
      noteLinkSuccess(qp, wqe);
      return Step::kFinished;
    }
    if (wqe.op == Op::kWrite && qp.ctx->device->index == config().failNic) {
      fail(wqe, kLocalUnreachableRemote);  // a broken link (NNF_SOFT_EFA_FAIL_NIC)
      continue;
    }
    uint32_t limit = wqe.op == Op::kSend ? kMtu : config().maxRdmaSize;
    if (wqe.length > limit) {
      fail(wqe, kLocalBadLength);
      continue;
    }
    Target target;
    uint32_t status = resolve(proc, wqe, &target);
    if (status != kOk) {
      fail(wqe, status);
      continue;
    }
    SendWqe::Phase before = wqe.phase;
    if (wqe.phase == SendWqe::kDeliver) {
      deliver(proc, qp, wqe, target, now);
    } else if (wqe.op == Op::kSend) {
      stepSend(proc, qp, wqe, target, now);
    } else {
      stepRma(proc, qp, wqe, target, now);
    }
    // One step a pass, but a step that reached the completion completes now.
    if (wqe.phase == SendWqe::kComplete && before != SendWqe::kComplete) continue;
    return Step::kPending;
  }
}

}  // namespace

int writeStats() {
  const Config& cfg = config();
  if (cfg.stats.empty()) return -1;
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  FILE* file = std::fopen(cfg.stats.c_str(), "ae");
  if (file == nullptr) return -1;
  for (const auto& [slot, bytes] : proc.traffic) {
    const Device* device = deviceBySlot(slot);
    std::fprintf(file, "%s %llu %llu %llu %d\n", device != nullptr ? device->ibv.name : "?",
                 static_cast<unsigned long long>(bytes[0]),
                 static_cast<unsigned long long>(bytes[1]),
                 static_cast<unsigned long long>(bytes[2]), static_cast<int>(getpid()));
  }
  std::fclose(file);
  return 0;
}

Process& process() {
  static Process* proc = makeProcess();
  return *proc;
}

uint64_t nextRandom(Process& proc) {
  // splitmix64: small, seedable, and good enough to shuffle a queue.
  uint64_t z = (proc.rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t nowNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
}

void progress(Process& proc) {
  int pid = getpid();
  uint64_t now = 0;
  static thread_local std::vector<uint32_t> order;
  static thread_local std::vector<uint8_t> finished;
  for (Qp* qp : proc.qps) {
    if (qp->owner != pid || qp->pending.empty()) continue;
    if (now == 0) now = nowNs();
    size_t count = qp->pending.size();
    order.resize(count);
    std::iota(order.begin(), order.end(), 0u);
    if (config().reorder)
      for (size_t i = count - 1; i > 0; --i) std::swap(order[i], order[nextRandom(proc) % (i + 1)]);
    finished.assign(count, 0);
    for (uint32_t index : order) {
      SendWqe& wqe = qp->pending[index];
      if (wqe.hold > 0) {
        --wqe.hold;
        continue;
      }
      if (wqe.retryAtNs > now) continue;
      finished[index] = step(proc, *qp, wqe, now) == Step::kFinished;
    }
    size_t kept = 0;
    for (size_t i = 0; i < count; ++i)
      if (!finished[i]) qp->pending[kept++] = qp->pending[i];
    qp->pending.resize(kept);
  }
}

namespace {

bool hasWork(const Process& proc) {
  int pid = getpid();
  for (const Qp* qp : proc.qps)
    if (qp->owner == pid && !qp->pending.empty()) return true;
  return false;
}

// The device's thread: passes over the pending work while it moves; while it waits (delays,
// a receiver not ready, a full ring) it sleeps between passes, longer the longer nothing moves;
// with nothing pending it waits for the next post.
void deviceThread(Process* proc) {
  std::unique_lock<std::recursive_mutex> lock(proc->mutex);
  uint64_t idleUs = 0;
  for (;;) {
    if (proc->threadPid != getpid()) return;  // a stale thread record: not ours (fork)
    if (!hasWork(*proc)) {
      proc->wake.wait(lock);
      idleUs = 0;
      continue;
    }
    uint64_t before = proc->moves;
    progress(*proc);
    bool moved = proc->moves != before;
    idleUs = moved ? 0 : std::min<uint64_t>(idleUs == 0 ? 5 : idleUs * 2, 1000);
    lock.unlock();  // let the program's threads in between passes
    if (idleUs == 0) {
      sched_yield();
    } else {
      timespec pause = {0, static_cast<long>(idleUs * 1000)};
      nanosleep(&pause, nullptr);
    }
    lock.lock();
  }
}

}  // namespace

void kick(Process& proc) {
  if (proc.threadPid != getpid()) {
    proc.threadPid = getpid();
    std::thread(deviceThread, &proc).detach();
  }
  proc.wake.notify_one();
}

void onPolled(Process& proc, const Cq& cq, const Cqe& cqe) {
  for (Qp* qp : proc.qps) {
    if (qp->qpn != cqe.qpNum || qp->ctx->device != cq.ctx->device) continue;
    if (!(cqe.flags & kCqeRecv)) {
      if (qp->sqOutstanding > 0) --qp->sqOutstanding;
    } else if (!(cqe.flags & kCqeUnsolicited)) {
      if (qp->rqOutstanding > 0) --qp->rqOutstanding;
    }
    return;
  }
}

}  // namespace nnf::softefa

extern "C" __attribute__((visibility("default"))) int nnf_soft_efa_write_stats() {
  return nnf::softefa::writeStats();
}
