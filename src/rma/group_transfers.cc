// NCCL's iput, iputSignal, iget and iflush: their arguments are checked first (each failure one
// WARN, and nothing posted), then the request starts. Nothing here allocates once the context's
// request pool has grown to what NCCL keeps in flight.
//
// A put's data goes as writes with immediate data (each segment tells the target it landed: the
// target counts them, rma/links.h); a get's as reads. How either is cut over the rails is
// group_shares.cc; a signaled put's entry into the target's ring is group_signal.cc.
#include <algorithm>

#include "core/device.h"
#include "log/log.h"
#include "memory/gdr_policy.h"
#include "rma/group.h"

namespace nnf::rma {
namespace {

using Lock = std::lock_guard<fabric::DomainLock>;

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

abi::Result Group::checkPut(const Context& ctx, int stream, const Window* src, uint64_t srcOff,
                            size_t size, const Window* dst, uint64_t dstOff, uint32_t rank,
                            const char* entry) const {
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
  if (size == 0) return abi::kSuccess;  // no window is touched
  abi::Result result = checkWindow(src, entry, "source");
  if (result == abi::kSuccess) result = checkWindow(dst, entry, "destination");
  if (result != abi::kSuccess) return result;
  if (!src->holds(srcOff, size)) {
    NNF_WARN("RMA %s: %zu bytes at offset %llu lie outside the %zu-byte source window", entry, size,
             static_cast<unsigned long long>(srcOff), src->size);
    return abi::kInvalidUsage;
  }
  const RemoteWindow& remote = dst->remote[rank];
  if (dstOff > remote.size || size > remote.size - dstOff) {
    NNF_WARN("RMA %s: %zu bytes at offset %llu lie outside rank %u's %llu-byte window", entry, size,
             static_cast<unsigned long long>(dstOff), rank,
             static_cast<unsigned long long>(remote.size));
    return abi::kInvalidUsage;
  }
  return abi::kSuccess;
}

abi::Result Group::checkSignal(const SignalArgs& signal, size_t size, uint32_t rank) const {
  abi::Result result = checkWindow(signal.window, "iputSignal", "signal");
  if (result != abi::kSuccess) return result;
  if (signal.op != kSignalOpInc && signal.op != kSignalOpAdd) {
    NNF_WARN("RMA iputSignal: unknown signal operation %u (1: INC, 2: ADD)", signal.op);
    return abi::kInvalidUsage;
  }
  const RemoteWindow& remote = signal.window->remote[rank];
  if (signal.offset % sizeof(uint64_t) != 0 || signal.offset > remote.size ||
      remote.size - signal.offset < sizeof(uint64_t)) {
    NNF_WARN(
        "RMA iputSignal: signal offset %llu is not an 8-byte aligned word of rank %u's "
        "%llu-byte window",
        static_cast<unsigned long long>(signal.offset), rank,
        static_cast<unsigned long long>(remote.size));
    return abi::kInvalidUsage;
  }
  // The entry announces its segments in 16 bits, and the share cut may add one per rail.
  if (segmentCount(size) + memory::kMaxRails > 0xffff) {
    NNF_WARN("RMA iputSignal: %zu bytes take more than 65535 segments", size);
    return abi::kInvalidUsage;
  }
  return abi::kSuccess;
}

abi::Result Group::put(Context& ctx, int stream, Window* src, uint64_t srcOff, size_t size,
                       Window* dst, uint64_t dstOff, uint32_t rank, const SignalArgs* signal,
                       Request** out) {
  const char* entry = signal != nullptr ? "iputSignal" : "iput";
  *out = nullptr;
  abi::Result result = checkPut(ctx, stream, src, srcOff, size, dst, dstOff, rank, entry);
  if (result == abi::kSuccess && signal != nullptr) result = checkSignal(*signal, size, rank);
  if (result != abi::kSuccess) return result;
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
  if (signal != nullptr) {
    queueSignaled(*request, *signal);
    *out = request;
    return abi::kSuccess;
  }
  if (size > 0) {
    // One of host memory into host memory that fits the provider's inject size is injected
    // (EFA's inject is a CPU copy: never from or into GPU memory).
    const RemoteWindow& remote = dst->remote[rank];
    bool inject = size <= injectLimit_ && src->host && remote.host;
    planShares(*request, src->base + srcOff, remote.address + dstOff, size, remote.keys, src->mh,
               encode(ImmKind::kPlain, linkAt(rank), 0), false);
    peer.out.notePlain(request->segments);
    hold(*request, src->mh);
    result = postShares(*request, inject);
    if (result != abi::kSuccess) {
      abandon(*request, result);
      return result;
    }
  }
  settle(*request);
  *out = request;
  return abi::kSuccess;
}

abi::Result Group::checkGet(const Context& ctx, int stream, const Window* remoteWindow,
                            uint64_t remoteOff, size_t size, const Window* local, uint64_t localOff,
                            uint32_t rank) const {
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
  if (size == 0) return abi::kSuccess;  // no window is touched
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
  return abi::kSuccess;
}

abi::Result Group::get(Context& ctx, int stream, Window* remoteWindow, uint64_t remoteOff,
                       size_t size, Window* local, uint64_t localOff, uint32_t rank,
                       Request** out) {
  *out = nullptr;
  abi::Result result = checkGet(ctx, stream, remoteWindow, remoteOff, size, local, localOff, rank);
  if (result != abi::kSuccess) return result;
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
    result = postShares(*request, false);
    if (result != abi::kSuccess) {
      abandon(*request, result);
      return result;
    }
  }
  settle(*request);
  *out = request;
  return abi::kSuccess;
}

abi::Result Group::flush(Context& ctx, int stream, Window* window, uint32_t rank, Request** out) {
  *out = nullptr;
  abi::Result result = checkWindow(window, "iflush", "flushed");
  if (result != abi::kSuccess) return result;
  if (rank >= nranks_ || stream < 0 || stream >= ctx.streams()) {
    NNF_WARN("RMA iflush: rank %u or context %d out of range (%u ranks, %d contexts)", rank, stream,
             nranks_, ctx.streams());
    return abi::kInvalidUsage;
  }
  if (window->host || window->mh == nullptr) return abi::kSuccess;  // nothing to make visible
  core::Device& dev = device();
  memory::FlushDecision decision =
      memory::decideFlush({window->mh->type, sizeof(uint64_t), dev.flushSetting(), dev.rmaRead(),
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
  result = postFlushRead(*request, *window);
  if (result != abi::kSuccess) {
    abandon(*request, result);
    return result;
  }
  *out = request;
  return abi::kSuccess;
}

abi::Result Group::postFlushRead(Request& request, Window& window) {
  // A read of the window through the NIC from our own endpoint: it completes after the writes
  // the NIC placed before it, which is what makes them visible to the GPU.
  OpSlot& slot = request.ops[0];
  core::Operation& op = slot.op;
  op.owner = this;
  op.index = kRoleFlush;
  op.type = core::OpType::kRead;
  op.rail = 0;
  op.peer = peers_[rank_].addr[0];
  op.buffer = ring_ + flushOffset_;
  op.length = std::min<size_t>(sizeof(uint64_t), window.size);
  op.desc = ringMh_->desc;
  op.remoteAddress = window.mh->remoteAddress(window.base);
  op.remoteKey = window.mh->key();
  slot.left = 0;
  slot.entry = false;
  request.shares = 1;
  hold(request, window.mh);
  abi::Result result = postOp(op);
  if (result != abi::kSuccess) return result;
  ++request.pending;
  ++callerOps_;
  return abi::kSuccess;
}

}  // namespace nnf::rma
