#include "core/path_health.h"

#include <algorithm>
#include <cstdio>

namespace nnf::core {

int PathHealth::find(size_t rail, fi_addr_t peer) const {
  for (size_t i = 0; i < kMaxPaths; ++i) {
    const Path& path = paths_[i];
    if (path.used && path.rail == rail && path.peer == peer) return static_cast<int>(i);
  }
  return -1;
}

int PathHealth::room() const {
  int up = -1;
  for (size_t i = 0; i < kMaxPaths; ++i) {
    if (!paths_[i].used) return static_cast<int>(i);
    if (up < 0 && paths_[i].link.state() == RailState::kUp) up = static_cast<int>(i);
  }
  return up;
}

void PathHealth::recount() {
  down_ = 0;
  for (const Path& path : paths_) down_ += path.used && path.link.state() != RailState::kUp;
}

PathHealth::Marked PathHealth::markDown(size_t rail, fi_addr_t peer, uint64_t nowNs,
                                        const char* what, int* index) {
  int found = find(rail, peer);
  if (found < 0) {
    found = room();
    if (found < 0) return Marked::kNoRoom;
    paths_[found] = Path{};
    paths_[found].used = true;
    paths_[found].rail = static_cast<uint8_t>(rail);
    paths_[found].peer = peer;
  }
  *index = found;
  Path& path = paths_[found];
  if (!path.link.markDown(nowNs, probeIntervalNs_)) return Marked::kAlready;
  path.named = false;
  snprintf(path.what, sizeof(path.what), "%s", what);
  recount();
  return Marked::kNow;
}

bool PathHealth::isDown(size_t rail, fi_addr_t peer) const {
  if (down_ == 0) return false;
  int found = find(rail, peer);
  return found >= 0 && paths_[found].link.state() != RailState::kUp;
}

int PathHealth::takeUnnamed(size_t rail) {
  for (size_t i = 0; i < kMaxPaths; ++i) {
    Path& path = paths_[i];
    if (path.used && path.rail == rail && !path.named && path.link.state() != RailState::kUp) {
      path.named = true;
      return static_cast<int>(i);
    }
  }
  return -1;
}

void PathHealth::forgetRail(size_t rail) {
  for (Path& path : paths_) {
    if (path.used && path.rail == rail && path.link.state() != RailState::kProbing) path = Path{};
  }
  recount();
}

void PathHealth::forget(int index) {
  paths_[index] = Path{};
  recount();
}

void PathHealth::replacePeer(size_t rail, fi_addr_t from, fi_addr_t to) {
  for (Path& path : paths_) {
    if (path.used && path.rail == rail && path.peer == from) path.peer = to;
  }
}

int PathHealth::takeDueProbe(uint64_t nowNs) {
  if (down_ == 0) return -1;
  for (size_t i = 0; i < kMaxPaths; ++i) {
    Path& path = paths_[i];
    if (path.used && path.link.due(nowNs, probeIntervalNs_)) {
      path.link.startProbe();
      return static_cast<int>(i);
    }
  }
  return -1;
}

uint64_t PathHealth::nextProbeInNs(uint64_t nowNs) const {
  uint64_t wait = UINT64_MAX;
  if (down_ == 0 || probeIntervalNs_ == 0) return wait;
  for (const Path& path : paths_) {
    if (path.used) wait = std::min(wait, path.link.waitFrom(nowNs));
  }
  return wait;
}

void PathHealth::probeSucceeded(int index, uint64_t nowNs) {
  paths_[index].link.probeSucceeded(nowNs);
  recount();
}

void PathHealth::probeFailed(int index, uint64_t nowNs) {
  paths_[index].link.probeFailed(nowNs, probeIntervalNs_);
}

}  // namespace nnf::core
