// When the sender of an rdma comm may send a message eagerly, without waiting for its
// descriptor (rdma_eager.h; docs/architecture.md, "The eager mode"): after the receiver's grant,
// while the receiver says that its small receives go undescribed (kEagerAhead on its last
// descriptor group) or has been quiet for kEagerQuietNs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/rdma_eager.h"
#include "protocol/state_machine.h"

namespace nnf::protocol::rdma {

enum class SendEagerMode : uint8_t {
  kUngranted,  // no grant yet: every send waits for its descriptor
  kOff,        // granted, but nothing goes eagerly (a limit of 0: ours, the area's, no memory,
               // or GPU buffers the provider cannot write from)
  kDescribed,  // the receiver describes its receives: sends wait for descriptors
  kQuiet,      // no descriptor came for kEagerQuietNs: small sends go until the next group
  kAhead,      // the receiver's last group said kEagerAhead: small sends go at once
};
constexpr size_t kSendEagerModes = 5;

inline const char* stateName(SendEagerMode mode) {
  switch (mode) {
    case SendEagerMode::kUngranted:
      return "ungranted";
    case SendEagerMode::kOff:
      return "off";
    case SendEagerMode::kDescribed:
      return "described";
    case SendEagerMode::kQuiet:
      return "quiet";
    case SendEagerMode::kAhead:
      return "ahead";
  }
  return "?";
}

class SendEagerState {
 public:
  SendEagerMode mode() const { return mode_; }

  // The grant came; `enabled`: we send messages eagerly (a limit above 0).
  void onGrant(bool enabled) {
    to(!enabled         ? SendEagerMode::kOff
       : receiverAhead_ ? SendEagerMode::kAhead
                        : SendEagerMode::kDescribed);
  }
  // Whether sends may go eagerly now (`now()`: the steady clock in ns, read only where the
  // receiver's quiet time decides).
  template <typename Now>
  bool open(Now&& now) {
    switch (mode_) {
      case SendEagerMode::kAhead:
      case SendEagerMode::kQuiet:
        return true;
      case SendEagerMode::kDescribed:
        if (now() - lastDescriptorNs_ < kEagerQuietNs) return false;
        to(SendEagerMode::kQuiet);
        return true;
      default:
        return false;
    }
  }
  // A descriptor group came; `ahead`: it said kEagerAhead. Returns true when the receiver's run
  // of undescribed small receives starts with it (sends waiting may go eagerly now).
  template <typename Now>
  bool onDescriptorGroup(bool ahead, Now&& now) {
    bool sending = mode_ >= SendEagerMode::kDescribed;
    // Stamped every 8th group: at most a few microseconds stale in a stream, against a quiet
    // time of 1 ms, for an eighth of the clock reads (every descriptor group pays this test);
    // and the first group after a quiet time, which ends it.
    if (sending && ((descriptorGroups_++ & 7) == 0 || mode_ == SendEagerMode::kQuiet)) {
      lastDescriptorNs_ = now();
    }
    bool started = ahead && !receiverAhead_;
    receiverAhead_ = ahead;
    if (sending) to(ahead ? SendEagerMode::kAhead : SendEagerMode::kDescribed);
    return started;
  }
  // A GPU buffer cannot go eagerly (the provider would copy it with the CPU): a receiver that
  // leaves small receives undescribed for us must hear that we send nothing eagerly. True when
  // it must (the mode is off from now on).
  bool onGpuRefused() {
    if (mode_ != SendEagerMode::kAhead) return false;
    to(SendEagerMode::kOff);
    return true;
  }

 private:
  static constexpr Transitions<SendEagerMode, kSendEagerModes> kAllowed{
      {SendEagerMode::kUngranted, SendEagerMode::kOff},
      {SendEagerMode::kUngranted, SendEagerMode::kDescribed},
      {SendEagerMode::kUngranted, SendEagerMode::kAhead},
      {SendEagerMode::kDescribed, SendEagerMode::kDescribed},
      {SendEagerMode::kDescribed, SendEagerMode::kQuiet},
      {SendEagerMode::kDescribed, SendEagerMode::kAhead},
      {SendEagerMode::kQuiet, SendEagerMode::kDescribed},
      {SendEagerMode::kQuiet, SendEagerMode::kAhead},
      {SendEagerMode::kAhead, SendEagerMode::kAhead},
      {SendEagerMode::kAhead, SendEagerMode::kDescribed},
      {SendEagerMode::kAhead, SendEagerMode::kOff},
  };
  void to(SendEagerMode next) {
    checkTransition(kAllowed, "eager sender", mode_, next);
    mode_ = next;
  }

  SendEagerMode mode_ = SendEagerMode::kUngranted;
  // What the receiver's last descriptor group said (kEagerAhead), granted or not yet.
  bool receiverAhead_ = false;
  uint64_t lastDescriptorNs_ = 0;  // when the receiver's descriptors last came (every 8th group)
  uint64_t descriptorGroups_ = 0;
};

}  // namespace nnf::protocol::rdma
