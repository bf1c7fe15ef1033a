// The source side of a group: iput, iputSignal, iget, iflush, test, progress, and what their
// operations' completions do. Nothing here allocates once the context's request pool has grown
// to what NCCL keeps in flight.
//
// A put's data goes as writes with immediate data (each segment tells the target it landed: the
// target counts them, rma/links.h); a large one is cut into one share per rail as the net
// plugin's sends are, a small one goes whole on the next rail in turn, and one of host memory
// into host memory that fits the provider's inject size is injected (EFA's inject is a CPU copy:
// never from or into GPU memory). A signaled put adds its entry, written into the target's ring;
// a small one from host into host memory carries its bytes in the entry (one write in all).
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/device.h"
#include "log/log.h"
#include "memory/gdr_policy.h"
#include "rma/group.h"

namespace nnf::rma {
namespace {

using Lock = std::lock_guard<fabric::DomainLock>;
constexpr uint64_t kStripeAlign = 4096;  // shares in whole pages (EFA orders by 128 bytes)
constexpr uint32_t kMaintainEvery = 64;  // progress calls between peer checks

uint64_t divCeil(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

abi::Result Group::checkWindow(const Window* window, const char* entry, const char* what) const {
  if (window == nullptr) {
    NNF_WARN("RMA %s: NULL %s window handle", entry, what);
    return abi::kInternalError;
  }
  if (window->ref.magic != HandleRef::kMagicAlive || window->ref.kind != HandleKind::kWindow ||
      window->group != this) {
    NNF_WARN("RMA %s: %p is not a %s window of this group (deregistered already?)", entry,
             static_cast<const void*>(window), what);
    return abi::kInternalError;
  }
  return abi::kSuccess;
}

abi::Result Group::postOp(core::Operation& op) {
  abi::Result result = device().post(op);
  if (result == abi::kSuccess) ++opsOut_;
  return result;
}

void Group::hold(Request& request, core::MemoryHandle* mh) {
  if (mh == nullptr) return;
  for (core::MemoryHandle*& slot : request.held) {
    if (slot == mh) return;
    if (slot == nullptr) {
      core::beginUse(mh);
      slot = mh;
      return;
    }
  }
}

void Group::releaseHeld(Request& request) {
  for (core::MemoryHandle*& slot : request.held) {
    if (slot != nullptr) core::endUse(slot);
    slot = nullptr;
  }
}

void Group::planShares(Request& request, uint8_t* localBase, uint64_t remoteAddress, size_t size,
                       const uint64_t* keys, core::MemoryHandle* localMh, uint64_t immediate,
                       bool read) {
  Peer& peer = peers_[request.peer];
  size_t rails = request.peer == rank_ ? 1 : peer.rails;
  request.shares = 0;
  request.segments = 0;
  if (size == 0) return;
  uint64_t share = size;
  size_t first = 0;
  if (rails > 1 && stripeMin_ > 0 && size >= stripeMin_) {
    share = divCeil(divCeil(size, rails), kStripeAlign) * kStripeAlign;
  } else {
    first = peer.turn++ % rails;
  }
  for (uint64_t offset = 0; offset < size; offset += share) {
    size_t rail = (first + request.shares) % rails;
    uint64_t length = std::min<uint64_t>(share, size - offset);
    uint64_t segment = std::min(length, segmentMax_);
    OpSlot& slot = request.ops[request.shares++];
    core::Operation& op = slot.op;
    op.owner = this;
    op.index = kRoleShare;
    op.type = read ? core::OpType::kRead : core::OpType::kWrite;
    op.rail = static_cast<uint8_t>(rail);
    op.peer = peer.addr[rail];
    op.tag = immediate;
    op.desc = localMh != nullptr ? localMh->descOn(rail) : nullptr;
    op.remoteKey = keys[rail];
    op.buffer = localBase + offset;
    op.length = segment;
    op.remoteAddress = remoteAddress + offset;
    slot.entry = false;
    slot.left = length - segment;
    slot.nextLocal = reinterpret_cast<uint64_t>(localBase + offset + segment);
    slot.nextRemote = remoteAddress + offset + segment;
    request.segments += static_cast<uint32_t>(divCeil(length, segmentMax_));
  }
}

abi::Result Group::postShares(Request& request, bool inject) {
  for (uint8_t i = 0; i < request.shares; ++i) {
    OpSlot& slot = request.ops[i];
    if (inject && slot.left == 0) {
      abi::Result result = device().inject(slot.op);
      if (result == abi::kSuccess) continue;  // the provider copied it: nothing comes back
      if (result != abi::kInProgress) return result;
    }
    abi::Result result = postOp(slot.op);
    if (result != abi::kSuccess) return result;
    ++request.pending;
    ++callerOps_;
  }
  return abi::kSuccess;
}

abi::Result Group::put(Context& ctx, int stream, Window* src, uint64_t srcOff, size_t size,
                       Window* dst, uint64_t dstOff, uint32_t rank, const SignalArgs* signal,
                       Request** out) {
  const char* entry = signal != nullptr ? "iputSignal" : "iput";
  *out = nullptr;
  if (!connected_ || closing_) {
    NNF_WARN("RMA %s: the group is not connected (closed already?)", entry);
    return abi::kInternalError;
  }
  if (stream < 0 || stream >= ctx.streams()) {
    NNF_WARN("RMA %s: context %d out of range (the RMA context has %d)", entry, stream,
             ctx.streams());
    return abi::kInvalidUsage;
  }
  if (rank >= nranks_) {
    NNF_WARN("RMA %s: rank %u out of range (the group has %u ranks)", entry, rank, nranks_);
    return abi::kInvalidUsage;
  }
  if (size > 0) {
    abi::Result result = checkWindow(src, entry, "source");
    if (result == abi::kSuccess) result = checkWindow(dst, entry, "destination");
    if (result != abi::kSuccess) return result;
    if (!src->holds(srcOff, size)) {
      NNF_WARN("RMA %s: %zu bytes at offset %llu lie outside the %zu-byte source window", entry,
               size, static_cast<unsigned long long>(srcOff), src->size);
      return abi::kInvalidUsage;
    }
    const RemoteWindow& remote = dst->remote[rank];
    if (dstOff > remote.size || size > remote.size - dstOff) {
      NNF_WARN("RMA %s: %zu bytes at offset %llu lie outside rank %u's %llu-byte window", entry,
               size, static_cast<unsigned long long>(dstOff), rank,
               static_cast<unsigned long long>(remote.size));
      return abi::kInvalidUsage;
    }
  }
  if (signal != nullptr) {
    abi::Result result = checkWindow(signal->window, entry, "signal");
    if (result != abi::kSuccess) return result;
    if (signal->op != kSignalOpInc && signal->op != kSignalOpAdd) {
      NNF_WARN("RMA iputSignal: unknown signal operation %u (1: INC, 2: ADD)", signal->op);
      return abi::kInvalidUsage;
    }
    const RemoteWindow& remote = signal->window->remote[rank];
    if (signal->offset % sizeof(uint64_t) != 0 || signal->offset > remote.size ||
        remote.size - signal->offset < sizeof(uint64_t)) {
      NNF_WARN("RMA iputSignal: signal offset %llu is not an 8-byte aligned word of rank %u's "
               "%llu-byte window",
               static_cast<unsigned long long>(signal->offset), rank,
               static_cast<unsigned long long>(remote.size));
      return abi::kInvalidUsage;
    }
    if (divCeil(size, segmentMax_) + memory::kMaxRails > 0xffff) {
      NNF_WARN("RMA iputSignal: %zu bytes take more than 65535 segments", size);
      return abi::kInvalidUsage;
    }
  }
  Lock lock(device().domainLock());
  Peer& peer = peers_[rank];
  if (peer.dead) return abi::kRemoteError;  // said once, by markDead
  Request* request =
      ctx.acquire(signal != nullptr ? RequestKind::kPutSignal : RequestKind::kPut, rank);
  if (request == nullptr) {
    NNF_WARN("RMA %s: out of memory for requests", entry);
    return abi::kSystemError;
  }
  ++peer.outstanding;
  request->src = src;
  request->dst = dst;
  request->srcOff = srcOff;
  request->dstOff = dstOff;
  request->size = size;
  if (signal == nullptr) {
    if (size > 0) {
      const RemoteWindow& remote = dst->remote[rank];
      bool inject = size <= injectLimit_ && src->host && remote.host;
      planShares(*request, src->base + srcOff, remote.address + dstOff, size, remote.keys,
                 src->mh, encode(ImmKind::kPlain, linkAt(rank), 0), false);
      peer.out.notePlain(request->segments);
      hold(*request, src->mh);
      abi::Result result = postShares(*request, inject);
      if (result != abi::kSuccess) {
        abandon(*request, result);
        return result;
      }
    }
    settle(*request);
    *out = request;
    return abi::kSuccess;
  }
  request->signalWindow = signal->window->index;
  request->signalOffset = signal->offset;
  request->signalValue = signal->value;
  request->signalOp = static_cast<uint8_t>(signal->op);
  request->strong = signal->strong;
  request->plainBefore = peer.out.plainSent();
  if (peer.waitHead == nullptr && startSignaled(*request)) {
    settle(*request);
  } else {
    // No ring slot free at the target (or older puts wait for one): credits start it.
    request->state = Request::State::kWaitingSlot;
    if (peer.waitTail != nullptr) {
      peer.waitTail->nextWaiting = request;
    } else {
      peer.waitHead = request;
    }
    peer.waitTail = request;
  }
  *out = request;
  return abi::kSuccess;
}

bool Group::startSignaled(Request& request) {
  uint32_t p = request.peer;
  Peer& peer = peers_[p];
  if (!peer.out.slotFree()) return false;
  uint32_t slot = peer.out.nextSeq() % kSlots;
  if ((peer.stagingBusy & (uint64_t{1} << slot)) != 0) return false;  // its last write is out
  request.seq = peer.out.takeSeq();
  request.state = Request::State::kActive;
  const RemoteWindow& remote = request.dst != nullptr ? request.dst->remote[p] : RemoteWindow{};
  bool host = request.src != nullptr && request.src->host && remote.host;
  bool inlined = request.size > 0 && request.size <= kInlineMax && host;
  request.shares = 0;
  request.segments = 0;
  if (request.size > 0 && !inlined) {
    planShares(request, request.src->base + request.srcOff, remote.address + request.dstOff,
               request.size, remote.keys, request.src->mh,
               encode(ImmKind::kSignaled, linkAt(p), request.seq), false);
    hold(request, request.src->mh);
  }
  auto* staged = reinterpret_cast<SignalEntry*>(stagingEntry(p, slot));
  staged->signalOffset = request.signalOffset;
  staged->value = request.signalValue;
  staged->dstOffset = request.dstOff;
  staged->signalWindow = request.signalWindow;
  staged->dstWindow = inlined ? request.dst->index : kNoWindow;
  staged->plainBefore = request.plainBefore;
  staged->segments = static_cast<uint16_t>(request.segments);
  staged->op = request.signalOp;
  staged->flags = request.strong ? kEntryStrong : 0;
  staged->inlineBytes = static_cast<uint16_t>(inlined ? request.size : 0);
  staged->seq = static_cast<uint16_t>(request.seq);
  staged->reserved = 0;
  if (inlined) memcpy(staged->payload, request.src->base + request.srcOff, request.size);

  OpSlot& entrySlot = request.ops[kShareOps];
  core::Operation& op = entrySlot.op;
  op.owner = this;
  op.index = kRoleEntry;
  op.type = core::OpType::kWrite;
  op.rail = 0;
  op.peer = peer.addr[0];
  op.buffer = staged;
  op.length = kEntryHeaderBytes + staged->inlineBytes;
  op.desc = ringMh_->desc;
  op.remoteAddress =
      peer.ringAddress + size_t{rank_} * kRingBytes + size_t{slot} * kEntryBytes;
  op.remoteKey = peer.ringKey;
  op.tag = encode(ImmKind::kEntry, linkAt(p), request.seq);
  entrySlot.entry = true;
  entrySlot.left = 0;

  abi::Result result = postShares(request, request.size <= injectLimit_ && host);
  if (result == abi::kSuccess) {
    if (op.length <= injectLimit_ && device().inject(op) == abi::kSuccess) return true;
    result = postOp(op);
    if (result == abi::kSuccess) {
      ++request.pending;
      peer.stagingBusy |= uint64_t{1} << slot;
      return true;
    }
  }
  fail(request, result);
  return true;
}

void Group::startWaiting(uint32_t p) {
  Peer& peer = peers_[p];
  while (Request* request = peer.waitHead) {
    if (!startSignaled(*request)) return;
    peer.waitHead = request->nextWaiting;
    if (peer.waitHead == nullptr) peer.waitTail = nullptr;
    request->nextWaiting = nullptr;
    settle(*request);
  }
}

abi::Result Group::get(Context& ctx, int stream, Window* remoteWindow, uint64_t remoteOff,
                       size_t size, Window* local, uint64_t localOff, uint32_t rank,
                       Request** out) {
  *out = nullptr;
  if (!connected_ || closing_) {
    NNF_WARN("RMA iget: the group is not connected (closed already?)");
    return abi::kInternalError;
  }
  if (stream < 0 || stream >= ctx.streams()) {
    NNF_WARN("RMA iget: context %d out of range (the RMA context has %d)", stream, ctx.streams());
    return abi::kInvalidUsage;
  }
  if (rank >= nranks_) {
    NNF_WARN("RMA iget: rank %u out of range (the group has %u ranks)", rank, nranks_);
    return abi::kInvalidUsage;
  }
  if (size > 0) {
    abi::Result result = checkWindow(remoteWindow, "iget", "remote");
    if (result == abi::kSuccess) result = checkWindow(local, "iget", "local");
    if (result != abi::kSuccess) return result;
    if (!local->holds(localOff, size)) {
      NNF_WARN("RMA iget: %zu bytes at offset %llu lie outside the %zu-byte local window", size,
               static_cast<unsigned long long>(localOff), local->size);
      return abi::kInvalidUsage;
    }
    const RemoteWindow& remote = remoteWindow->remote[rank];
    if (remoteOff > remote.size || size > remote.size - remoteOff) {
      NNF_WARN("RMA iget: %zu bytes at offset %llu lie outside rank %u's %llu-byte window", size,
               static_cast<unsigned long long>(remoteOff), rank,
               static_cast<unsigned long long>(remote.size));
      return abi::kInvalidUsage;
    }
  }
  Lock lock(device().domainLock());
  Peer& peer = peers_[rank];
  if (peer.dead) return abi::kRemoteError;
  Request* request = ctx.acquire(RequestKind::kGet, rank);
  if (request == nullptr) {
    NNF_WARN("RMA iget: out of memory for requests");
    return abi::kSystemError;
  }
  ++peer.outstanding;
  if (size > 0) {
    const RemoteWindow& remote = remoteWindow->remote[rank];
    planShares(*request, local->base + localOff, remote.address + remoteOff, size, remote.keys,
               local->mh, 0, true);
    hold(*request, local->mh);
    abi::Result result = postShares(*request, false);
    if (result != abi::kSuccess) {
      abandon(*request, result);
      return result;
    }
  }
  settle(*request);
  *out = request;
  return abi::kSuccess;
}

abi::Result Group::flush(Context& ctx, int stream, Window* window, uint32_t rank,
                         Request** out) {
  *out = nullptr;
  abi::Result result = checkWindow(window, "iflush", "flushed");
  if (result != abi::kSuccess) return result;
  if (rank >= nranks_ || stream < 0 || stream >= ctx.streams()) {
    NNF_WARN("RMA iflush: rank %u or context %d out of range (%u ranks, %d contexts)", rank,
             stream, nranks_, ctx.streams());
    return abi::kInvalidUsage;
  }
  if (window->host || window->mh == nullptr) return abi::kSuccess;  // nothing to make visible
  core::Device& dev = device();
  memory::FlushDecision decision = memory::decideFlush(
      {window->mh->type, sizeof(uint64_t), dev.flushSetting(), dev.rmaRead(),
       dev.cuda() != nullptr && dev.cuda()->hasFlush()});
  if (decision.method == memory::FlushMethod::kNone) return abi::kSuccess;
  if (decision.method == memory::FlushMethod::kCuda) {
    if (dev.cuda()->flushGdrWrites() != 0) {
      NNF_WARN("RMA iflush: cuFlushGPUDirectRDMAWrites failed");
      return abi::kUnhandledCudaError;
    }
    return abi::kSuccess;
  }
  Lock lock(dev.domainLock());
  Request* request = ctx.acquire(RequestKind::kFlush, rank_);
  if (request == nullptr) {
    NNF_WARN("RMA iflush: out of memory for requests");
    return abi::kSystemError;
  }
  ++peers_[rank_].outstanding;
  // A read of the window through the NIC from our own endpoint: it completes after the writes
  // the NIC placed before it, which is what makes them visible to the GPU.
  OpSlot& slot = request->ops[0];
  core::Operation& op = slot.op;
  op.owner = this;
  op.index = kRoleFlush;
  op.type = core::OpType::kRead;
  op.rail = 0;
  op.peer = peers_[rank_].addr[0];
  op.buffer = ring_ + flushOffset_;
  op.length = std::min<size_t>(sizeof(uint64_t), window->size);
  op.desc = ringMh_->desc;
  op.remoteAddress = window->mh->remoteAddress(window->base);
  op.remoteKey = window->mh->key();
  slot.left = 0;
  slot.entry = false;
  request->shares = 1;
  hold(*request, window->mh);
  result = postOp(op);
  if (result != abi::kSuccess) {
    abandon(*request, result);
    return result;
  }
  ++request->pending;
  ++callerOps_;
  *out = request;
  return abi::kSuccess;
}

void Group::finishOp(OpSlot& slot, bool ok, abi::Result error) {
  Request& request = *slot.request;
  --request.pending;
  if (!slot.entry) --callerOps_;
  if (slot.entry) {
    peers_[request.peer].stagingBusy &= ~(uint64_t{1} << (request.seq % kSlots));
  }
  if (!ok) {
    if (request.error == abi::kSuccess) request.error = error;
    if (request.state == Request::State::kActive) request.state = Request::State::kFailed;
  } else if (slot.left > 0 && request.state == Request::State::kActive) {
    // The next segment of the share (each no larger than the provider writes whole, so that
    // the target sees one completion per segment it was told of).
    uint64_t segment = std::min(slot.left, segmentMax_);
    slot.op.buffer = reinterpret_cast<void*>(slot.nextLocal);
    slot.op.length = segment;
    slot.op.remoteAddress = slot.nextRemote;
    slot.left -= segment;
    slot.nextLocal += segment;
    slot.nextRemote += segment;
    abi::Result result = postOp(slot.op);
    if (result == abi::kSuccess) {
      ++request.pending;
      ++callerOps_;
    } else {
      request.error = result;
      request.state = Request::State::kFailed;
    }
  }
  uint32_t peer = request.peer;
  bool entry = slot.entry;
  settle(request);
  if (entry) startWaiting(peer);  // its staging entry is free again
}

void Group::settle(Request& request) {
  if (request.pending > 0) return;
  switch (request.state) {
    case Request::State::kActive:
      // A flush is done once every older request of its context is.
      if (request.kind == RequestKind::kFlush && !request.ctx->oldest(request)) return;
      request.state = Request::State::kDone;
      finished(request);
      return;
    case Request::State::kFailed:
      finished(request);
      return;
    case Request::State::kAbandoned:
      finished(request);
      request.ctx->release(request);
      return;
    default:
      return;
  }
}

void Group::finished(Request& request) {
  if (request.finished) return;
  request.finished = true;
  Context& ctx = *request.ctx;
  bool wasOldest = ctx.oldest(request);
  ctx.unlink(request);
  releaseHeld(request);
  if (peers_[request.peer].outstanding > 0) --peers_[request.peer].outstanding;
  // A flush that waited for it (the next oldest) may be done now; settling it looks further.
  Request* next = wasOldest ? ctx.oldest() : nullptr;
  if (next != nullptr && next->kind == RequestKind::kFlush &&
      next->state == Request::State::kActive && next->pending == 0)
    settle(*next);
}

void Group::fail(Request& request, abi::Result error) {
  if (request.error == abi::kSuccess) request.error = error;
  if (request.state == Request::State::kActive || request.state == Request::State::kWaitingSlot)
    request.state = Request::State::kFailed;
  settle(request);
}

void Group::abandon(Request& request, abi::Result error) {
  if (request.error == abi::kSuccess) request.error = error;
  request.state = Request::State::kAbandoned;
  settle(request);
}

void Group::onComplete(core::Operation& op, size_t length) {
  --opsOut_;
  switch (op.index) {
    case kRoleShare:
    case kRoleEntry:
    case kRoleFlush:
      finishOp(*core::recordOf<OpSlot>(op), true, abi::kSuccess);
      return;
    case kRoleCredit: {
      PeerOp& credit = *core::recordOf<PeerOp>(op);
      if (peers_[credit.peer].creditOwed) sendCredit(credit.peer);
      return;
    }
    case kRoleWord:
      onWordDone(*core::recordOf<WordOp>(op), true);
      return;
    default:
      return;  // a set-up message went out
  }
}

void Group::onError(core::Operation& op, int error, size_t overflow, const char* text) {
  --opsOut_;
  bool cancelled = error == FI_ECANCELED;
  uint32_t peer = rank_;
  switch (op.index) {
    case kRoleShare:
    case kRoleEntry:
    case kRoleFlush:
      peer = core::recordOf<OpSlot>(op)->request->peer;
      break;
    case kRoleMessage:
    case kRoleCredit:
      peer = core::recordOf<PeerOp>(op)->peer;
      break;
    default:
      break;
  }
  if (!cancelled) {
    noteError();
    bool detail = text != nullptr && *text != '\0';
    if (!targetWarned_) {
      targetWarned_ = true;
      NNF_WARN("RMA group %u: a %zu-byte %s toward rank %u failed: %s%s%s%s", id(), op.length,
               core::opTypeName(op.type), peer, fi_strerror(error), detail ? " (" : "",
               detail ? text : "", detail ? ")" : "");
    } else {
      NNF_INFO(abi::kLogSubsysNet, "RMA group %u: a %zu-byte %s toward rank %u failed: %s", id(),
               op.length, core::opTypeName(op.type), peer, fi_strerror(error));
    }
  }
  switch (op.index) {
    case kRoleShare:
    case kRoleEntry:
    case kRoleFlush:
      finishOp(*core::recordOf<OpSlot>(op), false, abi::kRemoteError);
      return;
    case kRoleMessage:
      peers_[peer].messageFailed = !cancelled;
      return;
    case kRoleCredit:
      return;  // the link toward that rank is broken: its source's puts stall and fail there
    case kRoleWord:
      onWordDone(*core::recordOf<WordOp>(op), false);
      return;
    default:
      return;
  }
}

abi::Result Group::test(Request& request, int* done) {
  *done = 0;
  Lock lock(device().domainLock());
  if (&request.ctx->group() != this) {
    NNF_WARN("RMA test: request %p belongs to another group", static_cast<void*>(&request));
    return abi::kInternalError;
  }
  if (request.state == Request::State::kFree || request.state == Request::State::kAbandoned) {
    NNF_WARN("RMA test: %p is not a pending request (completed and reported already?)",
             static_cast<void*>(&request));
    return abi::kInternalError;
  }
  if (request.state == Request::State::kActive || request.state == Request::State::kWaitingSlot) {
    abi::Result result = device().progress();
    if (result != abi::kSuccess) return result;
    maintain();
  }
  switch (request.state) {
    case Request::State::kDone:
      *done = 1;
      request.ctx->release(request);
      return abi::kSuccess;
    case Request::State::kFailed: {
      abi::Result error = request.error != abi::kSuccess ? request.error : abi::kRemoteError;
      if (request.pending > 0) {
        request.state = Request::State::kAbandoned;  // released when the provider is done
      } else {
        request.ctx->release(request);
      }
      return error;
    }
    default:
      return abi::kSuccess;
  }
}

abi::Result Group::progress() {
  Lock lock(device().domainLock());
  abi::Result result = device().progress();
  maintain();
  return result;
}

void Group::maintain() {
  if (!blockedPeers_.empty()) retryBlocked();
  if (--stallCountdown_ != 0) return;
  stallCountdown_ = kMaintainEvery;
  if (peerCheckNs_ == 0) return;
  uint64_t now = core::nowNs();
  if (now - lastCheckNs_ < peerCheckNs_) return;
  lastCheckNs_ = now;
  checkPeers(now, false);
}

}  // namespace nnf::rma
