// Paths whose writes go silent (core/silence_watch.h): a write that neither completes nor fails
// gives the device nothing to react to (a NIC reset on efa, whose provider reads no device
// events; a link that dies under a write that was already acknowledged to nobody). Each comm of
// several rails (a receive comm for its own writes: descriptors, credits, control messages, the
// sender's writes landing on its other rails witnessing) is looked at every quarter of
// NCCL_FABRIC_RAIL_TIMEOUT_MS from the
// keeper's turn; a rail found silent (the leader too) is handled as a failed write's path, and
// its stuck writes are taken back as an endpoint error's stranded ones are (device_endpoint.cc),
// the comms' own operations to that peer with them (control messages, descriptor and credit
// writes: each goes again on a rail up, as after a broken path). Where the provider cannot forget
// a peer whose writes the device still holds (efa before libfabric 2.3), nothing is taken back:
// the path goes down for new messages, and what is stuck goes again once the provider fails it
// (SRD gives up on it).
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/data_comm.h"
#include "core/device.h"
#include "log/log.h"

namespace nnf::core {

uint64_t Device::lookForSilentPaths(uint64_t now) {
  if (silenceBoundNs_ == 0 || railCount_ < 2) return UINT64_MAX;
  const uint64_t interval = std::max<uint64_t>(silenceBoundNs_ / 4, 1);
  // Between looks: the keeper may sleep when the last look found nothing in flight (a hand-over
  // wakes it, and the next look comes at its first turn after the interval).
  if (now < nextSilenceLookNs_) return silenceWatching_ ? nextSilenceLookNs_ - now : UINT64_MAX;
  nextSilenceLookNs_ = now + interval;
  bool watching = false;
  std::vector<std::pair<size_t, fi_addr_t>> silent;  // allocates only when a path is silent
  // Not forEachDataComm: a std::function of this lambda would allocate at every look.
  for (const auto& entry : comms_) {
    Comm::Kind kind = entry.second->kind();
    if (kind != Comm::Kind::kSend && kind != Comm::Kind::kRecv) continue;
    auto& comm = static_cast<DataComm&>(*entry.second);
    // A closing comm is not judged: its close has its own bound, and a ping posted now could
    // outlive it.
    if (comm.rails() < 2 || comm.closed()) continue;
    uint32_t busy = comm.railsWriting();
    watching |= busy != 0;
    SilenceWatch::Findings found = comm.silence().look(now, busy, comm.rails(), silenceBoundNs_);
    if (found.unwitnessed != 0) comm.pingForWitness(found.unwitnessed);
    // A path down already (what is stuck there waits for the provider to fail it) is not named
    // again at every look.
    const uint32_t rails = found.silent & railHealth_.usable(comm.rails(), comm.pathsDown());
    for (size_t r = 0; r < comm.rails(); ++r) {
      // Once a path: its comms' writes are all taken back together (and its address replaced).
      std::pair<size_t, fi_addr_t> path(r, comm.peer(r));
      if ((rails & (1u << r)) != 0 && std::find(silent.begin(), silent.end(), path) == silent.end())
        silent.push_back(path);
    }
  }
  // After the walk: taking writes back fails requests, and their owners may post again.
  for (const auto& [rail, peer] : silent) pathWentSilent(rail, peer);
  // A broken path's probe that neither arrived nor failed within the bound: the path is still
  // silent. Taken back, it fails, and the path is probed again later.
  if (pathProbe_ != nullptr && now > silenceBoundNs_ && rails_->takesBackPostedWritesSafely()) {
    std::vector<std::pair<size_t, fi_addr_t>> overdue;
    pathProbe_->forEachPostedBefore(now - silenceBoundNs_,
                                    [&](Operation& op) { overdue.emplace_back(op.rail, op.peer); });
    for (const auto& [rail, peer] : overdue) {
      std::vector<fi_addr_t> peers{peer};
      takeBack(rail, peers, "a path probe that went unanswered");
    }
  }
  silenceWatching_ = watching;
  return watching ? interval : UINT64_MAX;
}

void Device::pathWentSilent(size_t rail, fi_addr_t peer) {
  char what[PathHealth::kWhatBytes];
  snprintf(what, sizeof(what),
           "completed no write to a peer for %llu ms while the same peer's writes on other rails "
           "did (NCCL_FABRIC_RAIL_TIMEOUT_MS)",
           static_cast<unsigned long long>(silenceBoundNs_ / 1000000));
  std::string peerName = peerText(rail, peer);
  pathBroke(rail, peer, what);  // as a failed write's: our NIC is asked whether it broke itself
  if (!rails_->takesBackPostedWritesSafely()) {
    NNF_INFO(abi::kLogSubsysNet,
             "device %d: rail %zu (NIC %s) %s: what is stuck on it to the peer at %s stays with "
             "the provider until it fails (this provider cannot forget a peer whose writes the "
             "device holds), then goes again on the rails left",
             index_, rail, railName(rail), what, peerName.c_str());
    return;
  }
  std::vector<fi_addr_t> peers{peer};
  size_t count = takeBack(rail, peers, "stuck on a silent path");
  NNF_INFO(abi::kLogSubsysNet,
           "device %d: rail %zu (NIC %s) %s: %zu write(s) to the peer at %s stuck on it taken back "
           "and sent again on the rails left",
           index_, rail, railName(rail), what, count, peerName.c_str());
}

}  // namespace nnf::core
