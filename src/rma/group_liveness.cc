// Whether a group's peers still live: a rank on this host is gone once its process has exited
// (checked while set-up waits, and every NCCL_FABRIC_PEER_CHECK_MS while requests toward it are
// outstanding); any rank is once a write to it failed. A dead rank's requests fail with
// ncclRemoteError and nothing more goes to it.
#include <signal.h>

#include <cerrno>
#include <cstdio>

#include "log/log.h"
#include "rma/group.h"

namespace nnf::rma {

void Group::checkPeers(uint64_t now, bool waitingForSetUp) {
  for (uint32_t p = 0; p < nranks_; ++p) {
    Peer& peer = peers_[p];
    if (!peer.local || peer.dead || p == rank_) continue;
    if (!waitingForSetUp && peer.outstanding == 0) continue;
    if (kill(static_cast<pid_t>(peer.pid), 0) == 0 || errno != ESRCH) continue;
    char why[64];
    snprintf(why, sizeof(why), "process %u has exited", peer.pid);
    markDead(p, why);
  }
}

void Group::markDead(uint32_t peer, const char* why) {
  Peer& p = peers_[peer];
  if (p.dead) return;
  p.dead = true;
  noteError();
  NNF_WARN("RMA group %u: rank %u (%s); its operations fail with ncclRemoteError", id(), peer, why);
  // Started signaled puts fail too; what the provider still holds of them comes back (or not)
  // on its own.
  failWaiting(peer);
  for (auto& context : contexts_) {
    context->forEach([&](Request& request) {
      if (request.peer == peer && request.state == Request::State::kActive)
        fail(request, abi::kRemoteError);
    });
  }
}

void Group::failWaiting(uint32_t peer) {
  // Signaled puts waiting for a ring slot never started: they fail as they are.
  Peer& p = peers_[peer];
  while (Request* request = p.waitHead) {
    p.waitHead = request->nextWaiting;
    request->nextWaiting = nullptr;
    request->state = Request::State::kActive;
    fail(*request, abi::kRemoteError);
  }
  p.waitTail = nullptr;
}

bool Group::peerGone() {
  for (uint32_t p = 0; p < nranks_; ++p) {
    if (peers_[p].outstanding > 0 && !peers_[p].dead) return false;
  }
  return true;
}

}  // namespace nnf::rma
