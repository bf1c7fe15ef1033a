// Whether the receiver of an rdma comm takes eager messages, and which of its receives go
// undescribed (rdma_eager.h; docs/architecture.md, "The eager mode"): the bounce area goes to a
// comm at the first receive an entry could fill after its first message landed; once granted,
// the receiver tells the sender with each descriptor group whether its next small receives go
// undescribed (kEagerAhead).
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/state_machine.h"

namespace nnf::protocol::rdma {

enum class RecvEagerMode : uint8_t {
  kNoMessage,   // nothing landed yet: the first message goes by descriptor, no bounce area
  kLanded,      // a message landed: the next receive an entry could fill takes the bounce area
  kOff,         // no bounce area (none on this device, or none could be had): never tried again
  kDescribing,  // granted; the last group described did not say kEagerAhead
  kAhead,       // granted; the last group described said kEagerAhead: small receives go
                // undescribed
};
constexpr size_t kRecvEagerModes = 5;

inline const char* stateName(RecvEagerMode mode) {
  switch (mode) {
    case RecvEagerMode::kNoMessage:
      return "no message";
    case RecvEagerMode::kLanded:
      return "landed";
    case RecvEagerMode::kOff:
      return "off";
    case RecvEagerMode::kDescribing:
      return "describing";
    case RecvEagerMode::kAhead:
      return "ahead";
  }
  return "?";
}

class RecvEagerState {
 public:
  RecvEagerMode mode() const { return mode_; }
  bool grantDue() const { return mode_ == RecvEagerMode::kLanded; }
  bool granted() const { return mode_ >= RecvEagerMode::kDescribing; }
  // The sender was told (kEagerAhead on the last group described) that small receives go
  // undescribed.
  bool aheadSaid() const { return mode_ == RecvEagerMode::kAhead; }

  // A message landed by descriptor.
  void onMessageLanded() {
    if (mode_ == RecvEagerMode::kNoMessage) to(RecvEagerMode::kLanded);
  }
  // The grant was tried: `granted`, the bounce area was taken and granted.
  void onGrant(bool granted) { to(granted ? RecvEagerMode::kDescribing : RecvEagerMode::kOff); }
  // A receive's descriptors were written; `ahead`: they said kEagerAhead (only a granted comm's
  // small receives do).
  void onDescribed(bool ahead) {
    if (!granted()) {
      NNF_ASSERT(!ahead, "eager receiver: kEagerAhead said in mode %s", stateName(mode_));
      return;
    }
    to(ahead ? RecvEagerMode::kAhead : RecvEagerMode::kDescribing);
  }

 private:
  static constexpr Transitions<RecvEagerMode, kRecvEagerModes> kAllowed{
      {RecvEagerMode::kNoMessage, RecvEagerMode::kLanded},
      {RecvEagerMode::kLanded, RecvEagerMode::kDescribing},
      {RecvEagerMode::kLanded, RecvEagerMode::kOff},
      {RecvEagerMode::kDescribing, RecvEagerMode::kDescribing},
      {RecvEagerMode::kDescribing, RecvEagerMode::kAhead},
      {RecvEagerMode::kAhead, RecvEagerMode::kAhead},
      {RecvEagerMode::kAhead, RecvEagerMode::kDescribing},
  };
  void to(RecvEagerMode next) {
    checkTransition(kAllowed, "eager receiver", mode_, next);
    mode_ = next;
  }

  RecvEagerMode mode_ = RecvEagerMode::kNoMessage;
};

}  // namespace nnf::protocol::rdma
