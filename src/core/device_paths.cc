// Paths that break beyond our NIC (core/path_health.h): a transfer's failure on a broken path
// takes that path down for the comms to its peer, and a read through our own NIC to ourselves,
// posted at once, tells whether the NIC itself broke (the rail goes down for every peer) or the
// failure lies beyond it (a peer's NIC, a cable, a switch port: the other peers keep the rail).
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>

#include "core/data_comm.h"
#include "core/device.h"
#include "log/log.h"

namespace nnf::core {

void Device::forEachDataComm(const std::function<void(DataComm&)>& visit) const {
  for (const auto& entry : comms_) {
    Comm& comm = *entry.second;
    if (comm.kind() == Comm::Kind::kSend || comm.kind() == Comm::Kind::kRecv) {
      visit(static_cast<DataComm&>(comm));
    }
  }
}

uint32_t Device::pathsDownOf(const DataComm& comm) const {
  if (paths_.downCount() == 0) return 0;
  uint32_t mask = 0;
  for (size_t r = 0; r < comm.rails(); ++r) {
    if (paths_.isDown(r, comm.peer(r))) mask |= 1u << r;
  }
  return mask;
}

void Device::refreshPathMasks() {
  forEachDataComm([this](DataComm& comm) { comm.setPathsDown(pathsDownOf(comm)); });
}

bool Device::takePathDown(size_t rail, fi_addr_t peer, const char* what) {
  int index = -1;
  switch (paths_.markDown(rail, peer, nowNs(), what, &index)) {
    case PathHealth::Marked::kAlready:
      return false;
    case PathHealth::Marked::kNoRoom:
      railPathBroke(rail, what);
      return false;
    case PathHealth::Marked::kNow:
      break;
  }
  // Before the failed operation's owner hears: it goes again on a rail its comm may still use.
  refreshPathMasks();
  return true;
}

void Device::pathBroke(size_t rail, fi_addr_t peer, const char* what) {
  if (railHealth_.state(rail) != RailState::kUp) return;  // down as a whole: its failure told
  // Without a probe nothing tells our NIC from the path (and a read of our own goes through
  // our NIC alone): the rail goes down as a whole, as it did before paths were told apart.
  if (pathProbe_ == nullptr || peer == selfAddresses_[rail] || peer == FI_ADDR_UNSPEC) {
    railPathBroke(rail, what);
    return;
  }
  if (takePathDown(rail, peer, what)) classifyRail(rail);
}

void Device::pathBrokeBeyondOurNic(size_t rail, fi_addr_t peer, const char* what) {
  if (!takePathDown(rail, peer, what)) return;
  nameBrokenPaths(rail);
  if (keeper_ != nullptr) keeper_->wake();  // it probes the path when due
}

void Device::classifyRail(size_t rail) {
  uint32_t bit = 1u << rail;
  if ((classifying_ & bit) != 0) return;  // the read in flight answers for this path too
  classifying_ |= bit;
  if (!railProbe_->post(rail)) onClassified(rail, FI_EIO);  // not even posted: our NIC
  if (keeper_ != nullptr) keeper_->wake();                  // it probes the path when due
}

void Device::onClassified(size_t rail, int error) {
  classifying_ &= ~(1u << rail);
  if (railHealth_.state(rail) != RailState::kUp) return;  // went down meanwhile: probed as such
  const bool ourNicFailed = error != 0;
  if (ourNicFailed) {
    // The rail broke, for every peer. Named with its first path's failure (or the endpoint's).
    char what[PathHealth::kWhatBytes] = "failed";
    int first = paths_.takeUnnamed(rail);
    if (first >= 0) {
      snprintf(what, sizeof(what), "%s", paths_.at(first).what);
    } else if (endpointWhat_[rail][0] != '\0') {
      snprintf(what, sizeof(what), "%s", endpointWhat_[rail]);
    }
    railPathBroke(rail, what);
    return;
  }
  nameBrokenPaths(rail);
}

void Device::nameBrokenPaths(size_t rail) {
  for (int index = paths_.takeUnnamed(rail); index >= 0; index = paths_.takeUnnamed(rail)) {
    const PathHealth::Path& path = paths_.at(index);
    std::string peer = peerText(rail, path.peer);
    if (path.link.failures() == 1) {
      NNF_WARN(
          "device %d: rail %zu (NIC %s) %s; our NIC works (a read through it succeeded), so the "
          "path to the peer at %s is broken beyond it: the comms to that peer move data on their "
          "other rails, what was in flight on it goes again on those (rdma), and every other peer "
          "keeps the rail%s",
          index_, rail, railName(rail), path.what, peer.c_str(),
          railHealth_.probes() ? "; the path is probed and rejoins when it works again" : "");
    } else {
      NNF_INFO(abi::kLogSubsysNet,
               "device %d: the path of rail %zu (NIC %s) to the peer at %s failed again (%u times "
               "now): %s",
               index_, rail, railName(rail), peer.c_str(), path.link.failures(), path.what);
    }
  }
}

bool Device::pathInUse(size_t rail, fi_addr_t peer) const {
  bool used = false;
  forEachDataComm([&](const DataComm& comm) {
    used |= !comm.closed() && rail < comm.rails() && comm.peer(rail) == peer;
  });
  return used;
}

uint64_t Device::probePaths(uint64_t now) {
  if (pathProbe_ == nullptr || paths_.downCount() == 0) return UINT64_MAX;
  for (int index = paths_.takeDueProbe(now); index >= 0; index = paths_.takeDueProbe(now)) {
    const PathHealth::Path& path = paths_.at(index);
    if (!pathInUse(path.rail, path.peer)) {
      // Its comms closed (a peer that went away): nothing to probe it for.
      NNF_INFO(abi::kLogSubsysNet,
               "device %d: the broken path of rail %zu (NIC %s) to the peer at %s is forgotten: "
               "no comm goes to that peer any more",
               index_, static_cast<size_t>(path.rail), railName(path.rail),
               peerText(path.rail, path.peer).c_str());
      paths_.forget(index);
      continue;
    }
    if (!pathProbe_->post(index, path.rail, path.peer, now)) paths_.probeFailed(index, now);
  }
  return paths_.nextProbeInNs(now);
}

void Device::onPathProbeEnded(int index, int error, const char* text) {
  const PathHealth::Path& path = paths_.at(index);
  size_t rail = path.rail;
  if (error != 0) {
    NNF_TRACE("device %d: probe of rail %zu's path to %s failed: %s (%s)", index_, rail,
              peerText(rail, path.peer).c_str(), fi_strerror(error), text != nullptr ? text : "");
    paths_.probeFailed(index, nowNs());
    return;
  }
  paths_.probeSucceeded(index, nowNs());
  refreshPathMasks();
  NNF_INFO(abi::kLogSubsysNet,
           "device %d: the path of rail %zu (NIC %s) to the peer at %s works again (a message "
           "over it was delivered): its comms use the rail again",
           index_, rail, railName(rail), peerText(rail, path.peer).c_str());
}

std::string Device::peerText(size_t rail, fi_addr_t peer) const {
  for (const auto& [key, address] : peers_) {
    if (key.first != rail || address != peer) continue;
    // The address's first bytes name the peer's NIC (efa: its GID; sockets: family, port, IP).
    std::string text;
    char byte[3];
    for (size_t i = 0; i < std::min<size_t>(key.second.size(), 16); ++i) {
      snprintf(byte, sizeof(byte), "%02x", key.second[i]);
      text += byte;
    }
    return text;
  }
  return "?";
}

}  // namespace nnf::core
