// closeColl: nothing new is issued, our operations on NCCL's memory end (bounded by
// NCCL_FABRIC_CLOSE_TIMEOUT_MS), every rank hears how many of our writes reached it and we wait
// until as many of its writes have landed here, then the windows and the ring area go and the
// device frees the group once the provider holds none of its operations.
// cancelInFlight is the device's step as it takes the group: what never reached the provider
// is unqueued, so that only the provider's own completions remain to wait for.
#include <thread>

#include "core/clock.h"
#include "core/device.h"
#include "log/log.h"
#include "rma/engine.h"
#include "rma/group.h"
#include "rma/listener.h"

namespace nnf::rma {
namespace {

using Lock = std::lock_guard<fabric::DomainLock>;

}  // namespace

void Group::cancelInFlight() {
  ref_.magic = HandleRef::kMagicDead;
  auto unqueue = [this](core::Operation& op) {
    if (!op.queued) return false;
    device().unqueue(op);
    --opsOut_;
    return true;
  };
  for (uint32_t p = 0; p < nranks_; ++p) {
    unqueue(peers_[p].message.op);
    unqueue(peers_[p].credit.op);
  }
  if (wordOps_) {
    for (uint32_t i = 0; i < words_->capacity(); ++i) unqueue(wordOps_[i].op);
  }
  for (auto& context : contexts_) {
    context->forEach([&](Request& request) {
      for (OpSlot& slot : request.ops) {
        if (!unqueue(slot.op)) continue;
        if (slot.op.index == kRoleEntry) {
          --entryOps_;
        } else {
          --callerOps_;
        }
        --request.pending;
      }
    });
  }
}

abi::Result Group::quiesce(uint64_t boundNs) {
  core::Device& dev = device();
  // NCCL may free its buffers once closeColl returns: our reads and writes of them end first.
  uint64_t lastMoveNs = core::nowNs();
  int lastCount = -1;
  for (;;) {
    uint64_t now = core::nowNs();
    {
      Lock lock(dev.domainLock());
      dev.progress();
      checkPeers(now, false);
      if (requestOpsOut() == 0 || peerGone()) return abi::kSuccess;
      if (requestOpsOut() != lastCount) {
        lastCount = requestOpsOut();
        lastMoveNs = now;
      }
      if (boundNs > 0 && now - lastMoveNs > boundNs) {
        NNF_WARN(
            "RMA closeColl: %d operation(s) on registered windows still with the provider "
            "after %llu ms (NCCL_FABRIC_CLOSE_TIMEOUT_MS); the peers are alive but take "
            "nothing",
            requestOpsOut(), static_cast<unsigned long long>(boundNs / 1000000));
        return abi::kRemoteError;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Group::sendCloseNotices() {
  for (uint32_t p = 0; p < nranks_; ++p) {
    Peer& peer = peers_[p];
    if (!peer.joined || peer.dead) continue;
    CloseMessage notice{};
    notice.magic = CloseMessage::kMagic;
    notice.version = kVersion;
    notice.kind = static_cast<uint32_t>(MessageKind::kClose);
    notice.session = peer.session;
    notice.rank = rank_;
    notice.writes = peer.written;
    if (sendMessage(p, peer.groupId, &notice, sizeof(notice)) != abi::kSuccess) peer.dead = true;
  }
}

uint32_t Group::firstUnclosed() const {
  for (uint32_t p = 0; p < nranks_; ++p) {
    const Peer& peer = peers_[p];
    bool heard = !peer.joined || peer.dead || (peer.closeHeard && peer.landed >= peer.closeWrites);
    // Our notice goes out before the group can go (its buffer is the group's).
    bool sent = !peer.message.op.inFlight && !peer.message.op.queued;
    if (!heard || !sent) return p;
  }
  return nranks_;
}

void Group::awaitPeersWrites(uint64_t boundNs) {
  core::Device& dev = device();
  {
    Lock lock(dev.domainLock());
    sendCloseNotices();
  }
  // Every rank's writes into our windows land before the windows go (or it dies, or the bound).
  uint64_t start = core::nowNs();
  for (;;) {
    uint64_t now = core::nowNs();
    {
      Lock lock(dev.domainLock());
      dev.progress();
      checkPeers(now, true);
      uint32_t waiting = firstUnclosed();
      if (waiting == nranks_) return;
      if (boundNs > 0 && now - start > boundNs) {
        NNF_INFO(abi::kLogSubsysNet,
                 "RMA closeColl: rank %u did not close within %llu ms; its writes into this "
                 "rank's windows are refused from now on",
                 waiting, static_cast<unsigned long long>(boundNs / 1000000));
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

abi::Result Group::close() {
  core::Device& dev = device();
  int64_t boundMs = dev.config().integer(config::Param::kCloseTimeoutMs);
  uint64_t boundNs = boundMs > 0 ? static_cast<uint64_t>(boundMs) * 1000000 : 0;
  {
    Lock lock(dev.domainLock());
    closing_ = true;  // nothing new is issued
    ref_.magic = HandleRef::kMagicDead;
    for (uint32_t p = 0; p < nranks_; ++p) failWaiting(p);
  }
  abi::Result result = quiesce(boundNs);
  if (connected_ && result == abi::kSuccess) awaitPeersWrites(boundNs);
  {
    Lock lock(dev.domainLock());
    if (linksHeld_) engine_.releaseLinks(linkBase_, nranks_);  // nothing lands here any more
    linksHeld_ = false;
    if (listener_ != nullptr) listener_->detach();
    listener_ = nullptr;
  }
  // After this the provider refuses any peer's access to the windows.
  for (auto& window : windows_) {
    if (window->alive) deregisterWindow(*window);
  }
  bool idle = false;
  {
    Lock lock(dev.domainLock());
    dev.progress();
    idle = opsOut_ == 0;
  }
  if (idle && ringMh_ != nullptr) {
    core::MemoryRegistry* registry = ringMh_->registry;
    registry->deregister(ringMh_);
    registry->releaseOwed();
    ringMh_ = nullptr;
  }
  Lock lock(dev.domainLock());
  dev.closeComm(*this);  // frees the group once the provider holds none of its operations
  return result;
}

void Group::releaseRegistrations() {
  for (auto& context : contexts_) {
    context->forEach([this](Request& request) { releaseHeld(request); });
  }
}
}  // namespace nnf::rma
