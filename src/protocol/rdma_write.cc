// The rdma protocol's data writes: a send's message written into the buffer its descriptor
// names, whole on one rail or striped over all of them (protocol/rdma.h, docs/architecture.md
// "Multi-rail").
#include <algorithm>

#include "core/device.h"
#include "core/memory_handle.h"
#include "core/send_comm.h"
#include "log/log.h"
#include "protocol/rdma.h"
#include "protocol/rdma_state.h"

namespace nnf::protocol::rdma {
namespace {

// The part of a message one rail carries: `length` bytes from `offset`, in `segments` writes.
struct Share {  // no initialisers: planShares fills those it uses (every send pays for them)
  uint64_t offset;
  uint64_t length;
  uint32_t segments;
};

// `segmentBytes`: the device's largest write (RdmaDevice::writeSegmentBytes: 2 GiB, or less where
// the provider would cut a write and give each piece the segment's immediate data).
uint32_t segmentsOf(uint64_t length, uint64_t segmentBytes) {
  return length == 0 ? 1 : static_cast<uint32_t>((length + segmentBytes - 1) / segmentBytes);
}

// How a message of `total` bytes goes: whole on one rail below the stripe size (or with one
// rail), else in page-aligned shares over every rail. Returns the number of shares.
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

}  // namespace

// Posts the writes of the send in `request` into the buffer `arrived` describes, one share per
// rail, or tells the receiver that the message does not fit. `handle`: the send's registration
// (null for buffers without one). Failures land in the request.
void startWrite(core::SendComm& comm, core::Request& request, const Arrived& arrived,
                const BufferDescriptor& buffer, core::MemoryHandle* handle) {
  core::Operation& first = request.ops[0];
  core::Device& device = comm.device();
  SendState& state = sendState(comm);
  uint64_t total = first.pendingSend.bytes;
  bool withLength = state.rdma.immediateCarriesLength();
  if (total > buffer.size) {
    NNF_WARN(
        "send of %llu bytes on comm %u does not fit the receiver's %llu-byte buffer (tag %d): "
        "nothing is sent, both sides fail",
        static_cast<unsigned long long>(total), comm.id(),
        static_cast<unsigned long long>(buffer.size), buffer.tag);
    request.state = core::Request::State::kFailed;
    request.error = abi::kInternalError;
    request.remaining = 1;
    first.rail = 0;
    first.headerLength = 0;
    first.peer = comm.peer();
    first.remoteAddress = buffer.address;
    first.remoteKey = buffer.keys[0];
    first.length = 0;
    first.segment.shareLeft = 0;
    first.transferred = 0;
    // The notice (no segments) carries the sent size only where the immediate has room for it
    // (8 bytes; EFA's 4 take the control word alone, and a provider refuses more).
    first.tag =
        encodeData(comm.remoteId(), arrived.slot, arrived.index, 0,
                   withLength ? static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX)) : 0);
    abi::Result result = device.post(first);
    if (result != abi::kSuccess) {
      request.remaining = 0;
      request.error = result;
    }
    return;
  }
  Share shares[kMaxRails];
  const uint64_t segmentBytes = state.rdma.writeSegmentBytes();
  uint32_t count =
      planShares(total, comm.rails(), state.rdma.stripeMinBytes(), segmentBytes, shares);
  uint32_t segments = 0;
  for (uint32_t i = 0; i < count; ++i) segments += shares[i].segments;
  // A message on one rail takes the rails in turn; an empty one goes where every key is valid.
  size_t firstRail = 0;
  if (count == 1 && total > 0 && comm.rails() > 1) {
    firstRail = state.nextRail;
    state.nextRail = (state.nextRail + 1) % comm.rails();
  }
  char* base = static_cast<char*>(first.buffer);
  request.count = static_cast<uint8_t>(count);
  request.remaining = 0;
  // Inject copies the bytes with the CPU (EFA emulates it so): host memory only.
  bool hostBuffer = handle == nullptr || handle->type == memory::MemType::kHost;
  bool inject = count == 1 && total > 0 && total <= device.injectLimit() && hostBuffer;
  for (uint32_t i = 0; i < count; ++i) {
    core::Operation& op = request.ops[i];
    size_t rail = firstRail + i;
    uint64_t segment = std::min(shares[i].length, segmentBytes);
    op.owner = &comm;
    op.type = core::OpType::kWrite;
    op.headerLength = 0;
    op.rail = static_cast<uint8_t>(rail);
    op.peer = comm.peer(rail);
    op.buffer = base + shares[i].offset;
    op.desc = handle != nullptr ? handle->descOn(rail) : nullptr;
    op.length = segment;
    op.segment.shareLeft = shares[i].length - segment;
    op.transferred = 0;
    op.remoteAddress = buffer.address + shares[i].offset;
    op.remoteKey = buffer.keys[rail];
    op.tag = encodeData(comm.remoteId(), arrived.slot, arrived.index, segments,
                        withLength ? static_cast<uint32_t>(segment) : 0);
    if (inject) {
      // A small message goes inline: no completion to wait for, the send is done already.
      abi::Result injected = device.inject(op);
      if (injected == abi::kSuccess) {
        ++state.written.written[rail];
        op.transferred = total;
        if (request.state == core::Request::State::kActive) {
          request.state = core::Request::State::kDone;
        }
        return;
      }
      if (injected != abi::kInProgress) {
        request.state = core::Request::State::kFailed;
        request.error = injected;
        return;
      }
    }
    abi::Result result = device.post(op);
    if (result != abi::kSuccess) {
      // The shares posted finish on their own; the request reports the failure.
      request.state = core::Request::State::kFailed;
      request.error = result;
      return;
    }
    ++request.remaining;
  }
}

}  // namespace nnf::protocol::rdma

namespace nnf::protocol {

bool Rdma::continueWrite(core::DataComm& comm, core::Operation& op) {
  // Every write of a request that completes carried immediate data: the receiver counts it.
  if (comm.kind() == core::Comm::Kind::kSend && comm.protocolState() != nullptr &&
      op.rail < rdma::kMaxRails) {
    ++rdma::sendState(comm).written.written[op.rail];
  }
  if (op.segment.shareLeft == 0 || op.request->state != core::Request::State::kActive) {
    return false;
  }
  op.transferred += op.length;
  op.buffer = static_cast<char*>(op.buffer) + op.length;
  op.remoteAddress += op.length;
  op.length = std::min(op.segment.shareLeft, device_.writeSegmentBytes());
  op.segment.shareLeft -= op.length;
  if (device_.immediateCarriesLength()) {
    op.tag = (op.tag & 0xffffffffu) | (uint64_t{op.length} << rdma::kLengthShift);
  }
  abi::Result result = comm.device().post(op);
  if (result == abi::kSuccess) return true;
  op.request->state = core::Request::State::kFailed;  // logged by the device
  op.request->error = result;
  return false;
}

}  // namespace nnf::protocol
