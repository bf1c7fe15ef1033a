#include "protocol/rdma_striping.h"

#include <algorithm>

#include "core/device.h"
#include "log/log.h"
#include "protocol/rdma_own_write.h"

namespace nnf::protocol::rdma {
namespace {

// `segmentBytes`: the device's largest write (RdmaDevice::writeSegmentBytes: 2 GiB, or less where
// the provider would cut a write and give each piece the segment's immediate data).
uint32_t segmentsOf(uint64_t length, uint64_t segmentBytes) {
  return length == 0 ? 1 : static_cast<uint32_t>((length + segmentBytes - 1) / segmentBytes);
}

}  // namespace

uint32_t planShares(uint64_t total, size_t rails, size_t stripeMin, uint64_t segmentBytes,
                    Share* shares) {
  size_t ways = total >= stripeMin && total > 0 ? rails : 1;
  if (ways == 1) {  // most messages: no division on the way
    shares[0] = Share{0, total, segmentsOf(total, segmentBytes)};
    return 1;
  }
  uint64_t share = (total + ways - 1) / ways;
  share = (share + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
  uint32_t count = 0;
  for (uint64_t offset = 0; count == 0 || offset < total; offset += share) {
    Share& part = shares[count++];
    part.offset = offset;
    part.length = std::min(share, total - offset);
    part.segments = segmentsOf(part.length, segmentBytes);
  }
  return count;
}

// The message does not fit its buffer: nothing is sent but a write of no bytes that says so.
void Striper::refuse(core::Request& request, const Arrived& arrived, const BufferDescriptor& buffer,
                     uint64_t total) {
  NNF_WARN(
      "send of %llu bytes on comm %u does not fit the receiver's %llu-byte buffer (tag %d): "
      "nothing is sent, both sides fail",
      static_cast<unsigned long long>(total), comm_.id(),
      static_cast<unsigned long long>(buffer.size), buffer.tag);
  core::Operation& first = request.ops[0];
  request.state = core::Request::State::kFailed;
  request.error = abi::kInternalError;
  request.remaining = 1;
  // On the first rail up, named like a share (its rail may break under it: rdma_send_recovery.h).
  size_t rail = ownWriteRail(comm_.device(), comm_);
  first.rail = static_cast<uint8_t>(rail);
  first.headerLength = 0;
  first.peer = comm_.peer(rail);
  first.remoteAddress = buffer.address;
  first.remoteKey = buffer.keys[rail];
  first.length = 0;
  first.segment = core::WriteSegment{0, buffer.tag, buffer.seq, 0, 1};
  first.transferred = 0;
  // The notice (no segments) carries the sent size only where the immediate has room for it
  // (8 bytes; EFA's 4 take the control word alone, and a provider refuses more).
  bool withLength = rdma_.immediateCarriesLength();
  first.tag =
      encodeData(comm_.remoteId(), arrived.slot, arrived.index, 0,
                 withLength ? static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX)) : 0);
  abi::Result result = comm_.device().post(first);
  if (result != abi::kSuccess) {
    request.remaining = 0;
    request.error = result;
    return;
  }
  // NCCL hears of this send's failure at its next test and may never call this sender again,
  // while the receive waits for the notice (which may wait in the retry queue): the device's
  // keeper, woken by the post, progresses it until it has gone.
}

// Posts the share in `op` (written inline where `inject`: a small message of host memory, then
// the send is done already). False when no more shares are to go: the send ended, or failed (the
// shares posted before finish on their own; the request reports the failure).
[[gnu::always_inline]] inline bool Striper::postShare(core::Request& request, core::Operation& op,
                                                      size_t rail, bool inject, uint64_t total) {
  core::Device& device = comm_.device();
  if (inject) {
    abi::Result injected = device.inject(op);
    if (injected == abi::kSuccess) {
      close_.countWrite(rail);
      op.transferred = total;
      if (request.state == core::Request::State::kActive) {
        request.state = core::Request::State::kDone;
      }
      return false;
    }
    if (injected != abi::kInProgress) {
      request.state = core::Request::State::kFailed;
      request.error = injected;
      return false;
    }
  }
  abi::Result result = device.post(op);
  if (result != abi::kSuccess) {
    request.state = core::Request::State::kFailed;
    request.error = result;
    return false;
  }
  ++request.remaining;
  return true;
}

void Striper::startWrite(core::Request& request, const Arrived& arrived,
                         const BufferDescriptor& buffer, core::MemoryHandle* handle) {
  core::Operation& first = request.ops[0];
  core::Device& device = comm_.device();
  uint64_t total = first.pendingSend.bytes;
  if (total > buffer.size) {
    refuse(request, arrived, buffer, total);
    return;
  }
  bool withLength = rdma_.immediateCarriesLength();
  Share shares[kMaxRails];
  const uint64_t segmentBytes = rdma_.writeSegmentBytes();
  // The rails that carry data: all of the comm's until one, or its path to our peer, fails
  // (core/rail_health.h, core/path_health.h).
  uint8_t carrying[kMaxRails] = {0};  // a comm of one rail: the leader
  size_t rails = comm_.rails();
  if (rails > 1) rails = device.railHealth().carrying(rails, carrying, comm_.pathsDown());
  uint32_t count = planShares(total, rails, rdma_.stripeMinBytes(), segmentBytes, shares);
  uint32_t segments = 0;
  for (uint32_t i = 0; i < count; ++i) segments += shares[i].segments;
  // A message on one rail takes the rails in turn; an empty one goes where every key is valid.
  size_t firstRail = 0;
  if (count == 1 && total > 0 && rails > 1) {
    if (nextRail_ >= rails) nextRail_ = 0;
    firstRail = nextRail_;
    nextRail_ = (nextRail_ + 1) % rails;
  }
  char* base = static_cast<char*>(first.buffer);
  request.count = static_cast<uint8_t>(count);
  request.remaining = 0;
  // Inject copies the bytes with the CPU (EFA emulates it so): host memory only. Not on a comm
  // of several rails: efa reports a failed inject without its context, so that a rail's failure
  // would lose the message unseen instead of failing its request (docs/failover.md).
  bool hostBuffer = handle == nullptr || handle->type == memory::MemType::kHost;
  bool inject =
      count == 1 && total > 0 && total <= device.injectLimit() && hostBuffer && comm_.rails() == 1;
  for (uint32_t i = 0; i < count; ++i) {
    core::Operation& op = request.ops[i];
    size_t rail = carrying[firstRail + i];
    uint64_t segment = std::min(shares[i].length, segmentBytes);
    op.owner = &comm_;
    op.type = core::OpType::kWrite;
    op.headerLength = 0;
    op.rail = static_cast<uint8_t>(rail);
    op.peer = comm_.peer(rail);
    op.buffer = base + shares[i].offset;
    op.desc = handle != nullptr ? handle->descOn(rail) : nullptr;
    op.length = segment;
    op.segment.shareLeft = shares[i].length - segment;
    op.segment.tag = buffer.tag;
    op.segment.seq = buffer.seq;
    op.segment.resent = 0;
    op.segment.notice = 0;
    op.transferred = 0;
    op.remoteAddress = buffer.address + shares[i].offset;
    op.remoteKey = buffer.keys[rail];
    op.tag = encodeData(comm_.remoteId(), arrived.slot, arrived.index, segments,
                        withLength ? static_cast<uint32_t>(segment) : 0);
    if (!postShare(request, op, rail, inject, total)) return;
  }
}

bool Striper::continueWrite(core::Operation& op) {
  if (op.segment.shareLeft == 0 || op.request->state != core::Request::State::kActive) {
    return false;
  }
  op.transferred += op.length;
  op.buffer = static_cast<char*>(op.buffer) + op.length;
  op.remoteAddress += op.length;
  op.length = std::min(op.segment.shareLeft, rdma_.writeSegmentBytes());
  op.segment.shareLeft -= op.length;
  if (rdma_.immediateCarriesLength()) {
    op.tag = (op.tag & 0xffffffffu) | (uint64_t{op.length} << kLengthShift);
  }
  abi::Result result = comm_.device().post(op);
  if (result == abi::kSuccess) return true;
  op.request->state = core::Request::State::kFailed;  // logged by the device
  op.request->error = result;
  return false;
}

}  // namespace nnf::protocol::rdma
