// The collective set-up's exchange: each rank's message to every rank (its join, or its record
// of a window registered), and the wait until every rank's has come. The wait progresses the
// device with the lock taken per pass, so that NCCL's net proxy threads on the same device are
// not held up, and ends when every rank has answered, a rank on this host is found dead, or at
// NCCL_FABRIC_RMA_SETUP_TIMEOUT_MS. Close notices come through here too (group_close.cc).
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/device.h"
#include "core/wire.h"
#include "log/log.h"
#include "rma/group.h"

namespace nnf::rma {
namespace {

constexpr uint64_t kSetUpCheckNs = 100 * 1000000ull;  // dead-rank checks while setting up

using Lock = std::lock_guard<fabric::DomainLock>;

}  // namespace

abi::Result Group::sendMessage(uint32_t peer, uint32_t remoteId, const void* payload,
                               size_t length) {
  Peer& p = peers_[peer];
  p.messageFailed = false;
  abi::Result result =
      device().controlChannel().send(p.message.op, p.slot.data, p.slot.desc, p.addr[0], remoteId,
                                     core::wire::ControlKind::kRma, payload, length);
  if (result != abi::kSuccess) {
    NNF_WARN("RMA: cannot send a set-up message to rank %u", peer);
    return result;
  }
  ++opsOut_;
  return abi::kSuccess;
}

uint32_t Group::firstMissing(Phase phase) const {
  for (uint32_t p = 0; p < nranks_; ++p) {
    const Peer& peer = peers_[p];
    if (peer.dead) continue;
    if (phase == Phase::kJoins ? !peer.joined : !windows_[recordsWanted_]->remote[p].present)
      return p;
  }
  return nranks_;
}

bool Group::exchange(const char* what, Phase phase) {
  core::Device& dev = device();
  int64_t timeoutMs = dev.config().integer(config::Param::kRmaSetupTimeoutMs);
  uint64_t start = core::nowNs();
  uint64_t deadline = timeoutMs > 0 ? start + static_cast<uint64_t>(timeoutMs) * 1000000 : 0;
  for (uint64_t spins = 0;; ++spins) {
    uint64_t now = core::nowNs();
    {
      Lock lock(dev.domainLock());
      if (dev.progress() != abi::kSuccess) return false;  // logged
      bool sent = true;
      for (uint32_t p = 0; p < nranks_; ++p) {
        const Peer& peer = peers_[p];
        if (peer.messageFailed) {
          NNF_WARN("RMA %s: the set-up message to rank %u failed", what, p);
          noteError();
          return false;
        }
        if (peer.message.op.inFlight || peer.message.op.queued) sent = false;
      }
      if (sent && firstMissing(phase) == nranks_) {
        for (uint32_t p = 0; p < nranks_; ++p) {
          if (peers_[p].dead) {
            NNF_WARN("RMA %s: rank %u is gone", what, p);
            return false;
          }
        }
        return true;
      }
      if (now - lastCheckNs_ > kSetUpCheckNs) {
        lastCheckNs_ = now;
        checkPeers(now, true);
      }
      if (deadline != 0 && now > deadline) {
        NNF_WARN(
            "RMA %s: rank %u did not answer within %lld ms "
            "(NCCL_FABRIC_RMA_SETUP_TIMEOUT_MS)",
            what, firstMissing(phase), static_cast<long long>(timeoutMs));
        noteError();
        return false;
      }
    }
    // Other ranks may share these cores: waiting here must leave them the CPU.
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void Group::onControlMessage(core::wire::ControlKind kind, const uint8_t* data, size_t length,
                             size_t rail) {
  WindowMessage record;
  std::string reason;
  MessageKind messageKind;
  if (kind != core::wire::ControlKind::kRma || !rma::messageKind(data, length, &messageKind)) {
    return;
  }
  if (messageKind == MessageKind::kClose) {
    CloseMessage notice;
    if (!decodeClose(data, length, &notice, &reason) || notice.session != session_ ||
        notice.rank >= nranks_) {
      NNF_WARN("RMA group %u: dropped a close notice: %s", id(),
               reason.empty() ? "it belongs to another group" : reason.c_str());
      return;
    }
    peers_[notice.rank].closeHeard = true;
    peers_[notice.rank].closeWrites = notice.writes;
    return;
  }
  if (messageKind != MessageKind::kWindow) return;
  if (!decodeWindow(data, length, &record, &reason) || record.session != session_ ||
      record.rank >= nranks_) {
    NNF_WARN("RMA group %u: dropped a window record: %s", id(),
             reason.empty() ? "it belongs to another group" : reason.c_str());
    return;
  }
  storeRecord(record);
}

}  // namespace nnf::rma
