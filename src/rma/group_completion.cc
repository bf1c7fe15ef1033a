// What the provider's completions do to a group's requests, and NCCL's test and progress calls
// that drive them. A request settles once the provider holds none of its operations: done, or
// failed with the first error any of them met. A flush settles only once every older request
// of its context has.
#include <rdma/fi_errno.h>

#include <algorithm>

#include "core/clock.h"
#include "core/device.h"
#include "log/log.h"
#include "rma/group.h"

namespace nnf::rma {
namespace {

using Lock = std::lock_guard<fabric::DomainLock>;
constexpr uint32_t kMaintainEvery = 64;  // progress calls between peer checks

}  // namespace

void Group::finishOp(OpSlot& slot, bool ok, abi::Result error) {
  Request& request = *slot.request;
  --request.pending;
  if (slot.entry) {
    --entryOps_;
    peers_[request.peer].stagingBusy &= ~(uint64_t{1} << (request.seq % kSlots));
  } else {
    --callerOps_;
  }
  // A write that completed reached its target (closing counts them, see quiesce()).
  if (ok && slot.op.type == core::OpType::kWrite) ++peers_[request.peer].written;
  if (!ok) {
    if (request.error == abi::kSuccess) request.error = error;
    if (request.state == Request::State::kActive) request.state = Request::State::kFailed;
  } else if (slot.left > 0 && request.state == Request::State::kActive) {
    postNextSegment(request, slot);
  }
  uint32_t peer = request.peer;
  bool entry = slot.entry;
  settle(request);
  if (entry) startWaiting(peer);  // its staging entry is free again
}

void Group::postNextSegment(Request& request, OpSlot& slot) {
  // Each segment no larger than the provider writes whole, so that the target sees one
  // completion per segment it was told of.
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

uint32_t Group::peerOf(core::Operation& op) const {
  switch (op.index) {
    case kRoleShare:
    case kRoleEntry:
    case kRoleFlush:
      return core::recordOf<OpSlot>(op)->request->peer;
    case kRoleMessage:
    case kRoleCredit:
      return core::recordOf<PeerOp>(op)->peer;
    default:
      return rank_;  // a GPU signal word's write, through our own endpoint
  }
}

void Group::reportOpError(const core::Operation& op, uint32_t peer, int error, const char* text) {
  noteError();
  bool detail = text != nullptr && *text != '\0';
  // The first failure of the group is a WARN; what follows from it mostly repeats it.
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

void Group::onError(core::Operation& op, int error, size_t overflow, const char* text) {
  --opsOut_;
  // Ours only while closing (cancelInFlight); before that the provider cancelled it (the EFA
  // stand-in does so for a write to a peer it lost): a failure like any other.
  bool cancelled = error == FI_ECANCELED && closing_;
  uint32_t peer = peerOf(op);
  if (!cancelled) reportOpError(op, peer, error, text);
  switch (op.index) {
    case kRoleShare:
    case kRoleEntry:
      finishOp(*core::recordOf<OpSlot>(op), false, abi::kRemoteError);
      // A write the target never counted breaks the link's accounting (its signals wait for
      // segments that will not land): nothing more goes to that rank. A failed read breaks
      // nothing at the target.
      if (!cancelled && op.type == core::OpType::kWrite && peer != rank_) {
        markDead(peer, "a write to it failed");
      }
      return;
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
