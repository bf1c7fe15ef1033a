// Which rails of a device carry data (issue 27, docs/failover.md). A rail goes down at the first
// error that says its path is broken (its NIC, its link, or the peer's NIC: efa's "unreachable
// remote" and "unresponsive remote", the network errors of a socket); new messages then take
// the rails still up, and the device reports their speed. What was in flight on the rail fails
// with its requests, as before: resending it needs the receiver's word on what landed (the
// failover design's query), which is still to come, and so is a rail's rejoin.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/region.h"

namespace nnf::core {

enum class RailState : uint8_t {
  kUp,    // carries data
  kDown,  // failed a transfer on a broken path: nothing new goes on it
};

inline const char* stateName(RailState state) {
  return state == RailState::kUp ? "up" : "down";
}

class RailHealth {
 public:
  explicit RailHealth(size_t rails)
      : rails_(rails < memory::kMaxRails ? rails : memory::kMaxRails),
        upMask_((1u << rails_) - 1) {}

  size_t rails() const { return rails_; }
  RailState state(size_t rail) const {
    return (upMask_ >> rail & 1u) != 0 ? RailState::kUp : RailState::kDown;
  }
  // Bit r: rail r is up. Every rail is, until one fails: read on every multi-rail message.
  uint32_t upMask() const { return upMask_; }
  size_t upCount() const { return static_cast<size_t>(__builtin_popcount(upMask_)); }

  // Whether a transfer's error `error` (a positive libfabric code) says that its path is broken,
  // rather than that the transfer itself was wrong (keys, lengths, a truncation) or the peer
  // process is gone (FI_ENOTCONN: its comms fail as before, whatever the rail).
  static bool isPathFailure(int error);

  // Rail `rail` failed a transfer on a broken path: true when it went down now (the caller logs
  // it once), false when it was down already.
  bool markDown(size_t rail);

  // The rails among the first `rails` that are up, lowest first, into `out` (kMaxRails
  // entries): their count. When none is, all `rails` of them: a comm whose every rail failed
  // fails its transfers as before, on whichever rail it posts them.
  size_t carrying(size_t rails, uint8_t* out) const {
    size_t count = 0;
    uint32_t mask = upMask_ & ((1u << rails) - 1);
    if (mask == 0) mask = (1u << rails) - 1;
    for (size_t r = 0; r < rails; ++r) {
      if ((mask >> r & 1u) != 0) out[count++] = static_cast<uint8_t>(r);
    }
    return count;
  }

 private:
  // The one transition function of a rail (asserted in debug builds: kUp -> kDown only, until
  // rejoining is built).
  void to(size_t rail, RailState next);

  size_t rails_;
  uint32_t upMask_;
};

}  // namespace nnf::core
