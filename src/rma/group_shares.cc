// How a request's data goes to the provider: cut into shares (one per rail for a large transfer,
// as the net plugin's sends are; a small one whole on the next rail in turn), each share posted
// a segment at a time, and the registrations it reads or writes held until its operations end.
// Shared by puts, signaled puts and gets (group_transfers.cc, group_signal.cc).
#include <algorithm>

#include "core/device.h"
#include "rma/group.h"

namespace nnf::rma {
namespace {

constexpr uint64_t kStripeAlign = 4096;  // shares in whole pages (EFA orders by 128 bytes)

uint64_t divCeil(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

abi::Result Group::postOp(core::Operation& op) {
  abi::Result result = device().post(op);
  if (result == abi::kSuccess) ++opsOut_;
  return result;
}

void Group::hold(Request& request, core::MemoryHandle* mh) {
  if (mh == nullptr) return;
  for (core::MemoryHandle*& slot : request.held) {
    if (slot == mh) return;
    if (slot == nullptr) {
      core::beginUse(mh);
      slot = mh;
      return;
    }
  }
}

void Group::releaseHeld(Request& request) {
  for (core::MemoryHandle*& slot : request.held) {
    if (slot != nullptr) core::endUse(slot);
    slot = nullptr;
  }
}

uint64_t Group::segmentCount(uint64_t length) const {
  return divCeil(length, segmentMax_);
}

void Group::planShares(Request& request, uint8_t* localBase, uint64_t remoteAddress, size_t size,
                       const uint64_t* keys, core::MemoryHandle* localMh, uint64_t immediate,
                       bool read) {
  Peer& peer = peers_[request.peer];
  size_t rails = request.peer == rank_ ? 1 : peer.rails;
  request.shares = 0;
  request.segments = 0;
  if (size == 0) return;
  uint64_t share = size;
  size_t first = 0;
  if (rails > 1 && stripeMin_ > 0 && size >= stripeMin_) {
    share = divCeil(divCeil(size, rails), kStripeAlign) * kStripeAlign;
  } else {
    first = peer.turn++ % rails;
  }
  for (uint64_t offset = 0; offset < size; offset += share) {
    size_t rail = (first + request.shares) % rails;
    uint64_t length = std::min<uint64_t>(share, size - offset);
    uint64_t segment = std::min(length, segmentMax_);
    OpSlot& slot = request.ops[request.shares++];
    core::Operation& op = slot.op;
    op.owner = this;
    op.index = kRoleShare;
    op.type = read ? core::OpType::kRead : core::OpType::kWrite;
    op.rail = static_cast<uint8_t>(rail);
    op.peer = peer.addr[rail];
    op.toOwnEndpoint = request.peer == rank_;
    op.tag = immediate;
    op.desc = localMh != nullptr ? localMh->descOn(rail) : nullptr;
    op.remoteKey = keys[rail];
    op.buffer = localBase + offset;
    op.length = segment;
    op.remoteAddress = remoteAddress + offset;
    slot.entry = false;
    slot.left = length - segment;
    slot.nextLocal = reinterpret_cast<uint64_t>(localBase + offset + segment);
    slot.nextRemote = remoteAddress + offset + segment;
    request.segments += static_cast<uint32_t>(segmentCount(length));
  }
}

abi::Result Group::postShares(Request& request, bool inject) {
  for (uint8_t i = 0; i < request.shares; ++i) {
    OpSlot& slot = request.ops[i];
    if (inject && slot.left == 0) {
      abi::Result result = device().inject(slot.op);
      if (result == abi::kSuccess) {
        ++peers_[request.peer].written;  // the provider copied it: nothing comes back
        continue;
      }
      if (result != abi::kInProgress) return result;
    }
    abi::Result result = postOp(slot.op);
    if (result != abi::kSuccess) return result;
    ++request.pending;
    ++callerOps_;
  }
  return abi::kSuccess;
}

}  // namespace nnf::rma
