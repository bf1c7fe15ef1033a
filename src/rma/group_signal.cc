// A signaled put's source side: its entry (signal word, value, how many data segments to wait
// for) is staged in our ring area and written into the target's ring after its data. The target
// has kSlots ring slots per source; a put that finds none free waits, in issue order, until the
// target's credits free one (startWaiting). A small put from host into host memory carries its
// bytes in the entry itself: one write in all.
#include <cstring>

#include "core/device.h"
#include "rma/group.h"

namespace nnf::rma {

void Group::queueSignaled(Request& request, const SignalArgs& signal) {
  Peer& peer = peers_[request.peer];
  request.signalWindow = signal.window->index;
  request.signalOffset = signal.offset;
  request.signalValue = signal.value;
  request.signalOp = static_cast<uint8_t>(signal.op);
  request.strong = signal.strong;
  // Plain segments sent on the link before it: a strong signal waits for them to land too.
  request.plainBefore = peer.out.plainSent();
  if (peer.waitHead == nullptr && startSignaled(request)) {
    settle(request);
    return;
  }
  // No ring slot free at the target (or older puts wait for one): credits start it.
  request.state = Request::State::kWaitingSlot;
  if (peer.waitTail != nullptr) {
    peer.waitTail->nextWaiting = &request;
  } else {
    peer.waitHead = &request;
  }
  peer.waitTail = &request;
}

bool Group::startSignaled(Request& request) {
  uint32_t p = request.peer;
  Peer& peer = peers_[p];
  if (!peer.out.slotFree()) return false;
  uint32_t slot = peer.out.nextSeq() % kSlots;
  if ((peer.stagingBusy & (uint64_t{1} << slot)) != 0) return false;  // its last write is out
  request.seq = peer.out.takeSeq();
  request.state = Request::State::kActive;
  const RemoteWindow& remote = request.dst != nullptr ? request.dst->remote[p] : RemoteWindow{};
  bool host = request.src != nullptr && request.src->host && remote.host;
  bool inlined = request.size > 0 && request.size <= kInlineMax && host;
  request.shares = 0;
  request.segments = 0;
  if (request.size > 0 && !inlined) {
    planShares(request, request.src->base + request.srcOff, remote.address + request.dstOff,
               request.size, remote.keys, request.src->mh,
               encode(ImmKind::kSignaled, linkAt(p), request.seq), false);
    hold(request, request.src->mh);
  }
  core::Operation& op = prepareEntryWrite(request, slot, stageEntry(request, slot, inlined));

  abi::Result result = postShares(request, request.size <= injectLimit_ && host);
  if (result == abi::kSuccess) {
    if (op.length <= injectLimit_ && device().inject(op) == abi::kSuccess) {
      ++peer.written;
      return true;
    }
    result = postOp(op);
    if (result == abi::kSuccess) {
      ++request.pending;
      ++entryOps_;
      peer.stagingBusy |= uint64_t{1} << slot;  // until the write completes (finishOp)
      return true;
    }
  }
  fail(request, result);
  return true;
}

SignalEntry& Group::stageEntry(const Request& request, uint32_t slot, bool inlined) {
  auto* staged = reinterpret_cast<SignalEntry*>(stagingEntry(request.peer, slot));
  staged->signalOffset = request.signalOffset;
  staged->value = request.signalValue;
  staged->dstOffset = request.dstOff;
  staged->signalWindow = request.signalWindow;
  staged->dstWindow = inlined ? request.dst->index : kNoWindow;
  staged->plainBefore = request.plainBefore;
  staged->segments = static_cast<uint16_t>(request.segments);
  staged->op = request.signalOp;
  staged->flags = request.strong ? kEntryStrong : 0;
  staged->inlineBytes = static_cast<uint16_t>(inlined ? request.size : 0);
  staged->seq = static_cast<uint16_t>(request.seq);
  staged->reserved = 0;
  if (inlined) memcpy(staged->payload, request.src->base + request.srcOff, request.size);
  return *staged;
}

core::Operation& Group::prepareEntryWrite(Request& request, uint32_t slot, SignalEntry& staged) {
  const Peer& peer = peers_[request.peer];
  OpSlot& entrySlot = request.ops[kShareOps];
  core::Operation& op = entrySlot.op;
  op.owner = this;
  op.index = kRoleEntry;
  op.type = core::OpType::kWrite;
  op.rail = 0;
  op.peer = peer.addr[0];
  op.toOwnEndpoint = request.peer == rank_;
  op.buffer = &staged;
  op.length = kEntryHeaderBytes + staged.inlineBytes;
  op.desc = ringMh_->desc;
  // Our row of the target's ring, at the slot of this sequence number.
  op.remoteAddress = peer.ringAddress + size_t{rank_} * kRingBytes + size_t{slot} * kEntryBytes;
  op.remoteKey = peer.ringKey;
  op.tag = encode(ImmKind::kEntry, linkAt(request.peer), request.seq);
  entrySlot.entry = true;
  entrySlot.left = 0;
  return op;
}

void Group::startWaiting(uint32_t p) {
  Peer& peer = peers_[p];
  while (Request* request = peer.waitHead) {
    if (!startSignaled(*request)) return;
    peer.waitHead = request->nextWaiting;
    if (peer.waitHead == nullptr) peer.waitTail = nullptr;
    request->nextWaiting = nullptr;
    settle(*request);
  }
}

}  // namespace nnf::rma
