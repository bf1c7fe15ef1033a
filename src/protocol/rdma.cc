#include "protocol/rdma.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "core/clock.h"
#include "core/device.h"
#include "core/memory_handle.h"
#include "core/recv_comm.h"
#include "core/send_comm.h"
#include "core/tags.h"
#include "log/log.h"
#include "platform/provider_rules.h"
#include "protocol/rdma_matching.h"
#include "protocol/rdma_state.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol {
namespace {

using rdma::Arrived;
using rdma::BufferDescriptor;
using rdma::recvState;
using rdma::RecvState;
using rdma::sendState;
using rdma::SendState;
static_assert(sizeof(rdma::WaitLink) <= sizeof(fi_context2) &&
              alignof(rdma::WaitLink) <= alignof(fi_context2));

// The tag field of a send that waits: who it waits for (checked when its descriptor comes).
uint64_t waitKey(int32_t tag, uint16_t seq) {
  return core::tags::data(0, seq, tag);
}

void unpost(core::Device& device, core::Operation& op) {
  if (op.queued) device.unqueue(op);
  if (op.inFlight) device.cancel(op);
}

// Tells the sender that this receive comm closed: it fails what waits for us, answers once its
// writes have ended, and may reuse its ring (no descriptor write of ours is in flight any more).
void sendCloseNotice(core::DataComm& comm, RecvState& state) {
  state.noticeOwed = false;
  uint8_t* buffer = state.staging->data + rdma::kNoticeOffset;
  // A failure is the device's to log: the peer may be gone already, which is what it would hear.
  comm.device().controlChannel().send(state.closeNotice, buffer, state.staging->desc, comm.peer(),
                                      comm.remoteId(), core::wire::ControlKind::kClosed, nullptr,
                                      0);
}

bool descriptorWritesInFlight(RecvState& state) {
  bool writing = false;
  state.forEachOwn([&state, &writing](const core::Operation& op) {
    if (&op != &state.closeNotice && op.inFlight) writing = true;
  });
  return writing;
}

// A receive comm's own operation completed or failed: true when it was one (a descriptor write or
// the close notice).
bool onDescriptorWrite(core::DataComm& comm, RecvState& state, core::Operation& op, int error) {
  if (&op == &state.closeNotice) {
    // A peer that cannot be told is gone: it writes nothing more either.
    if (error != 0) state.awaitingAck = false;
    return true;
  }
  uint32_t slot = state.slotOf(op);
  if (slot == rdma::kSlots) return false;
  if (error == 0) return true;
  core::Request* request = state.request(slot);
  state.release(slot);
  if (request != nullptr && error != FI_ECANCELED) rdma::failUndescribed(comm, *request, error);
  return true;
}

bool ringExposed(const core::DataComm& comm, SendState& state) {
  // The receiver may still write descriptors into the ring until it says it closed; a dead one
  // writes nothing more.
  if (!comm.closed() || state.receiverDone || comm.peerFailed()) return false;
  if (rdma::lingering(state.lingerUntilNs)) return true;
  // A live receiver that neither closed nor answered within the close bound: the comm goes, its
  // ring never returns to the arena (16 KiB), so that no new comm reads the late descriptors.
  state.receiverDone = true;
  state.ring.leak();
  NNF_INFO(abi::kLogSubsysNet,
           "comm %u: the receiver did not close within NCCL_FABRIC_CLOSE_TIMEOUT_MS; its "
           "descriptor ring is set aside rather than reused",
           comm.id());
  return false;
}

// A send that waited holds its memory handle in its pending-send payload (see Rdma::postSend);
// false, and the request failed, when NCCL deregistered the buffer meanwhile.
bool takeWaitingHandle(core::SendComm& comm, core::Request& request, core::MemoryHandle** handle) {
  core::Operation& op = request.ops[0];
  *handle = op.pendingSend.handle;
  op.pendingSend.handle = nullptr;
  if (*handle == nullptr) return true;
  --(*handle)->waitingSends;
  if (!(*handle)->released) return true;
  SendState& state = sendState(comm);
  if (!state.warnedReleased) {  // an abort releases many: one WARN a comm
    state.warnedReleased = true;
    NNF_WARN(
        "send of %llu bytes on comm %u: its buffer was deregistered before the receiver "
        "asked for it; the send fails",
        static_cast<unsigned long long>(op.pendingSend.bytes), comm.id());
  }
  request.state = core::Request::State::kFailed;
  request.error = abi::kInternalError;
  request.remaining = 0;
  return false;
}

// Entries came free, or the receiver said its small receives go undescribed, or went quiet: small
// sends waiting for their descriptors go eagerly instead, oldest first.
void sendWaitingEagerly(core::SendComm& comm, SendState& state) {
  if (state.matcher.sendsWaiting() == 0 || !rdma::eagerOpen(state)) return;
  while (state.credits.inUse() < rdma::kEagerEntries) {
    rdma::WaitLink* link = state.matcher.takeFirstWaiting([&state](rdma::WaitLink& waiting) {
      const core::Operation* op = core::Operation::fromContext(&waiting);
      return op->request->state == core::Request::State::kActive &&
             op->pendingSend.bytes <= state.eagerMaxBytes;
    });
    if (link == nullptr) return;
    int32_t tag = link->tag;
    uint16_t seq = link->seq;
    core::Request& request = *core::Operation::fromContext(link)->request;
    core::MemoryHandle* handle = nullptr;
    if (!takeWaitingHandle(comm, request, &handle)) continue;  // failed: deregistered meanwhile
    if (!rdma::sendEager(comm, state, request, tag, seq, handle)) {
      // Refused after all (no registration the provider can use): it waits again.
      core::Operation& op = request.ops[0];
      op.tag = waitKey(tag, seq);
      op.pendingSend.handle = handle;
      if (handle != nullptr) ++handle->waitingSends;
      state.matcher.addWaiting(new (&op.context) rdma::WaitLink, tag, seq);
      return;
    }
  }
}

}  // namespace

namespace rdma {

// The descriptors of `request` (its slot released) could not be written: no data will come for
// it, so it fails as one of its buffers would (one WARN a comm).
void failUndescribed(core::DataComm& comm, core::Request& request, int error) {
  request.remaining = 1;
  comm.onError(request.ops[0], error, 0, "writing the receive descriptors to the sender");
}

// Writes the descriptors of `count` buffers staged for `slot` into the sender's ring.
abi::Result writeDescriptors(core::RecvComm& comm, RecvState& state, uint32_t slot,
                             uint32_t count) {
  core::Operation& write = state.write(slot);
  write.request = nullptr;
  write.type = core::OpType::kWrite;
  write.headerLength = 0;
  write.buffer = state.staging->data + rdma::entryOffset(slot);
  write.length = static_cast<size_t>(count) * sizeof(BufferDescriptor);
  write.desc = state.staging->desc;
  write.peer = comm.peer();
  write.remoteAddress = state.ringAddress + rdma::entryOffset(slot);
  write.remoteKey = state.ringKey;
  write.tag = rdma::encodeDescriptors(comm.remoteId(), slot, count);
  return rdma::writeOwn(comm.device(), write);
}

}  // namespace rdma

abi::Result Rdma::startSend(core::SendComm& comm, ConnectInfo* info) {
  auto state = std::make_unique<SendState>(device_);
  if (!state->ring.acquire()) return abi::kSystemError;  // logged by the arena
  info->ringAddress = state->ring->remoteAddress;
  info->ringKey = state->ring->key;
  core::Device& device = comm.device();
  state->headerAhead =
      platform::rulesFor(platform::familyOf(device.provider())).writesWaitForTarget &&
      device.deliversInOrder();
  state->closedAck.owner = &comm;
  state->limitWrite.owner = &comm;
  comm.setProtocolState(std::move(state));
  return abi::kSuccess;
}

abi::Result Rdma::startRecv(core::RecvComm& comm, const ConnectInfo& info) {
  auto state = std::make_unique<RecvState>(device_);
  if (!state->staging.acquire()) return abi::kSystemError;
  state->ringAddress = info.ringAddress;
  state->ringKey = info.ringKey;
  state->closeNotice.owner = &comm;
  comm.setProtocolState(std::move(state));
  return abi::kSuccess;
}

abi::Result Rdma::postSend(core::SendComm& comm, core::Request& request, void* data, size_t size,
                           int tag, core::MemoryHandle* handle) {
  uint32_t next = 0;  // nextSequence sets it whenever it succeeds; GCC cannot tell
  if (!comm.nextSequence(tag, &next)) return abi::kInternalError;
  auto seq = static_cast<uint16_t>(next);
  core::Operation& op = request.ops[0];
  op.owner = &comm;
  op.type = core::OpType::kWrite;
  op.buffer = data;
  op.pendingSend = core::PendingSend{size, nullptr};  // the whole message until it is matched
  op.desc = handle != nullptr ? handle->desc : nullptr;
  op.peer = comm.peer();
  // Nothing is with the provider until the descriptor has come: a failure or abort before then
  // returns the request to the pool at once.
  request.remaining = 0;
  SendState& state = sendState(comm);
  Arrived arrived;
  if (state.matcher.takeDescriptor(tag, seq, &arrived)) {
    const auto* entries = reinterpret_cast<const BufferDescriptor*>(
        state.ring->data + rdma::entryOffset(arrived.slot));
    rdma::startWrite(comm, request, arrived, entries[arrived.index], handle);
    comm.holdRegistration(request, handle);
    return request.state == core::Request::State::kFailed && request.error != abi::kInternalError
               ? request.error
               : abi::kSuccess;
  }
  if (rdma::mayGoEagerly(state, size) && rdma::sendEager(comm, state, request, tag, seq, handle)) {
    return request.state == core::Request::State::kFailed ? request.error : abi::kSuccess;
  }
  op.tag = waitKey(tag, seq);
  // Until the write starts: NCCL may deregister the buffer meanwhile (deregMr, then close).
  op.pendingSend.handle = handle;
  if (handle != nullptr) ++handle->waitingSends;
  // Nothing is posted while it waits: the operation's context is ours to link it with.
  state.matcher.addWaiting(new (&op.context) rdma::WaitLink, tag, seq);
  return abi::kSuccess;
}

abi::Result Rdma::postRecv(core::RecvComm& comm, core::Request& request, int count,
                           void* const* data, const size_t* sizes, const int* tags,
                           core::MemoryHandle* const* handles) {
  RecvState& state = recvState(comm);
  uint32_t slot = state.freeSlot(comm);
  if (slot == rdma::kSlots) {
    // A slot comes back once its descriptor write's completion is read: NCCL may be retrying
    // irecv alone (and providers may hold completions back), so read them here too.
    if (comm.device().progress() != abi::kSuccess) return abi::kInProgress;  // logged there
    slot = state.freeSlot(comm);
    if (slot == rdma::kSlots) return abi::kInProgress;
  }
  if (!state.eagerTried && state.firstLanded) {
    // The bounce area (64 entries, about 0.5 MiB at 8 KiB) goes only to comms that receive a
    // second message and post a receive an eager message could fill: NCCL's step buffers are
    // larger, and a comm that carried one message (10,000 of them in scale_test) takes none.
    size_t eagerMax = device_.eagerMaxBytes();
    if (eagerMax == 0) state.eagerTried = true;  // nothing to grant: never look again
    for (int i = 0; i < count && eagerMax > 0; ++i) {
      if (sizes[i] > eagerMax) continue;
      rdma::grantEager(comm, state);
      break;
    }
  }
  auto* entries =
      reinterpret_cast<BufferDescriptor*>(state.staging->data + rdma::entryOffset(slot));
  bool small =
      rdma::eagerFillable(state, count, sizes[0], handles != nullptr ? handles[0] : nullptr);
  uint64_t sizes64[rdma::kGroup];
  core::MemoryHandle* described[rdma::kGroup] = {};
  // Buffers whose eager message is here already: nothing is described for them.
  uint32_t eager[rdma::kGroup];
  int settled = 0;
  for (int i = 0; i < count; ++i) {
    uint32_t next = 0;  // as in postSend
    if (!comm.nextSequence(tags[i], &next)) return abi::kInternalError;
    core::MemoryHandle* handle = handles != nullptr ? handles[i] : nullptr;
    BufferDescriptor& entry = entries[i];
    eager[i] = state.inbox.find(tags[i], static_cast<uint16_t>(next));
    entry.flags = 0;
    if (eager[i] != rdma::kEagerEntries) {
      entry.flags = rdma::kSettled;
      ++settled;
    }
    if (handle != nullptr && handle->mr != nullptr) {
      entry.address = handle->remoteAddress(data[i]);
      for (size_t r = 0; r < rdma::kMaxRails; ++r) entry.keys[r] = handle->key(r);
      described[i] = handle;
    } else if (sizes[i] == 0) {
      // Nothing will be written: any valid target does (our own staging entry, on the leader,
      // where empty messages go).
      entry.address = state.staging->remoteAddress;
      entry.keys[0] = state.staging->key;
      for (size_t r = 1; r < rdma::kMaxRails; ++r) entry.keys[r] = 0;
    } else {
      NNF_WARN(
          "irecv: buffer %d (%zu bytes) on comm %u has no memory handle; the rdma protocol "
          "writes only into registered buffers",
          i, sizes[i], comm.id());
      return abi::kInternalError;
    }
    entry.size = sizes[i];
    entry.tag = tags[i];
    entry.seq = static_cast<uint16_t>(next);
    entry.reserved2 = 0;
    sizes64[i] = sizes[i];
    core::Operation& op = request.ops[i];
    op.owner = &comm;
    op.type = core::OpType::kRecv;  // never posted: the sender's writes complete it
    op.buffer = data[i];
    op.length = sizes[i];
    op.transferred = 0;
    op.eagerCopy = core::EagerCopy{};
    op.tag = core::tags::data(comm.id(), next, tags[i]);
  }
  request.remaining = static_cast<uint8_t>(count);
  if (settled == count) {
    // Every message is here: no descriptor, no slot.
    request.slot = static_cast<uint16_t>(rdma::kSlots);
    for (int i = 0; i < count; ++i) {
      rdma::deliverEager(comm, state, request, static_cast<uint32_t>(i), eager[i],
                         handles != nullptr ? handles[i] : nullptr);
    }
    return abi::kSuccess;
  }
  request.slot = static_cast<uint16_t>(slot);
  state.progress(slot).arm(static_cast<uint32_t>(count), sizes64);
  state.take(slot, request);
  for (int i = 0; i < count; ++i) {
    if (eager[i] != rdma::kEagerEntries) state.progress(slot).settle(static_cast<uint32_t>(i));
    if (described[i] != nullptr) core::beginUse(described[i]);
    state.chunkOf(slot)->handles[slot % RecvState::kSlotsPerChunk][i] = described[i];
  }
  if (small && state.eagerAheadSaid && settled == 0) {
    // Its message comes eagerly (staged here in case it must be described late: onWaiting).
    state.undescribed |= 1u << slot;
    return abi::kSuccess;
  }
  // The first small receive tells the sender that the next ones go undescribed; any other ends
  // that run.
  if (small) entries[0].flags |= rdma::kEagerAhead;
  abi::Result result = rdma::writeDescriptors(comm, state, slot, static_cast<uint32_t>(count));
  if (result != abi::kSuccess) {
    state.release(slot);
    request.remaining = 0;
    return result;
  }
  state.eagerAheadSaid = small;
  for (int i = 0; i < count && settled > 0; ++i) {
    if (eager[i] == rdma::kEagerEntries) continue;
    rdma::deliverEager(comm, state, request, static_cast<uint32_t>(i), eager[i],
                       handles != nullptr ? handles[i] : nullptr);
  }
  return abi::kSuccess;
}

void Rdma::onRemoteWrite(core::Device& device, size_t rail, uint64_t data, size_t length) {
  rdma::Immediate imm = rdma::decode(data);
  core::Comm* comm = device.findComm(imm.commId);
  if (imm.kind == rdma::ImmKind::kDescriptors || imm.kind == rdma::ImmKind::kCredits) {
    if (comm == nullptr || comm->kind() != core::Comm::Kind::kSend || comm->closed()) return;
    auto& sender = static_cast<core::SendComm&>(*comm);
    if (sender.protocolState() == nullptr) return;
    SendState& state = sendState(sender);
    if (imm.kind == rdma::ImmKind::kCredits) {
      rdma::onCredits(sender, state, imm.count);
      sendWaitingEagerly(sender, state);
      return;
    }
    const auto* entries =
        reinterpret_cast<const BufferDescriptor*>(state.ring->data + rdma::entryOffset(imm.slot));
    // Stamped every 8th group: at most a few microseconds stale in a stream, against a quiet
    // time of 1 ms, for an eighth of the clock reads (every descriptor group pays this test);
    // and the first group after a quiet time, which ends it.
    if (state.eagerMaxBytes > 0 && ((state.descriptorGroups++ & 7) == 0 || state.quietOpen)) {
      state.lastDescriptorNs = core::nowNs();
      state.quietOpen = false;
    }
    state.matcher.expectGroup(imm.count);
    bool wasAhead = state.eagerAhead;
    state.eagerAhead = (entries[0].flags & rdma::kEagerAhead) != 0;
    for (uint32_t i = 0; i < imm.count; ++i) {
      const BufferDescriptor& buffer = entries[i];
      if ((buffer.flags & rdma::kSettled) != 0) continue;  // its message went eagerly
      Arrived arrived{buffer.tag, buffer.seq, static_cast<uint8_t>(imm.slot),
                      static_cast<uint8_t>(i)};
      rdma::WaitLink* link = state.matcher.takeWaiting(buffer.tag, buffer.seq);
      core::Request* request =
          link != nullptr ? core::Operation::fromContext(link)->request : nullptr;
      // A waiting send that failed or was given up meanwhile is no longer waiting.
      core::MemoryHandle* handle = nullptr;
      if (request != nullptr && request->state == core::Request::State::kActive &&
          request->ops[0].tag == waitKey(buffer.tag, buffer.seq)) {
        if (takeWaitingHandle(sender, *request, &handle)) {
          rdma::startWrite(sender, *request, arrived, buffer, handle);
          sender.holdRegistration(*request, handle);
        }
      } else if (link == nullptr && rdma::behind(buffer.seq, sender.sequences().peek(buffer.tag))) {
        // Its send went eagerly, or failed: nothing will be written, the slot may be reused.
        rdma::sendVoid(sender, state, imm.slot, i, buffer);
      } else {
        state.matcher.addDescriptor(arrived);
      }
    }
    // Small sends that waited will find no descriptor now: the receiver stopped describing.
    if (state.eagerAhead && !wasAhead) sendWaitingEagerly(sender, state);
    return;
  }
  if (comm == nullptr || comm->kind() != core::Comm::Kind::kRecv) return;  // closed meanwhile
  auto& receiver = static_cast<core::RecvComm&>(*comm);
  if (receiver.protocolState() == nullptr) return;
  RecvState& state = recvState(receiver);
  if (rail < rdma::kMaxRails) ++state.landed[rail];
  // The sender's last write has landed: a close waiting for it may end.
  if (state.awaitingAck && state.senderDone && state.allLanded()) state.awaitingAck = false;
  if (imm.kind == rdma::ImmKind::kEagerHeader) return;  // its message follows (counted above)
  if (imm.kind == rdma::ImmKind::kEagerLimit) {
    rdma::onEagerLimit(receiver, state, imm.count);
    return;
  }
  if (imm.kind == rdma::ImmKind::kEagerImplied) {
    rdma::EagerHeader header{0, static_cast<uint16_t>(imm.count), 0, imm.length, 0};
    rdma::onEagerLanded(receiver, state, imm.slot, &header);
    return;
  }
  if (imm.kind == rdma::ImmKind::kEager) {
    rdma::onEagerLanded(receiver, state, imm.slot);
    return;
  }
  if (imm.kind == rdma::ImmKind::kVoid) {
    rdma::onVoidLanded(receiver, state, imm.slot, imm.index);
    return;
  }
  core::Request* request = state.requestAt(imm.slot);
  uint64_t segmentBytes = device_.immediateCarriesLength() ? imm.length : length;
  uint64_t total = 0;
  rdma::SegmentOutcome outcome =
      request == nullptr
          ? rdma::SegmentOutcome::kInvalid
          : state.progress(imm.slot).onSegment(imm.index, imm.segments, segmentBytes, &total);
  switch (outcome) {
    case rdma::SegmentOutcome::kPending:
      return;
    case rdma::SegmentOutcome::kComplete:
      receiver.onComplete(request->ops[imm.index], total);
      // The first message went by descriptor (its sender learned the buffer's size before
      // writing); later small ones may go eagerly (postRecv grants the entries).
      state.firstLanded = true;
      break;
    case rdma::SegmentOutcome::kTruncated: {
      core::Operation& op = request->ops[imm.index];
      size_t overflow =
          device_.immediateCarriesLength() && imm.length > op.length ? imm.length - op.length : 0;
      receiver.onError(op, FI_ETRUNC, overflow, "message larger than the receive buffer");
      break;
    }
    case rdma::SegmentOutcome::kInvalid:
      if (!receiver.closed() && !warnedStray_) {
        warnedStray_ = true;
        NNF_WARN("comm %u: a write for request slot %u, buffer %u that no receive expects",
                 receiver.id(), imm.slot, imm.index);
      }
      return;
  }
  if (request->remaining == 0) state.finish(imm.slot);
}

bool Rdma::onOwnCompletion(core::DataComm& comm, core::Operation& op, int error) {
  if (comm.protocolState() == nullptr) return false;
  if (comm.kind() == core::Comm::Kind::kSend) {
    SendState& state = sendState(comm);
    if (&op == &state.closedAck) return true;
    auto& sender = static_cast<core::SendComm&>(comm);
    if (!rdma::onLimitWriteDone(sender, state, op, error) &&
        !rdma::onVoidDone(sender, state, op, error)) {
      return false;
    }
    onWriteDone(comm);  // a close answer may wait for this write
    return true;
  }
  RecvState& state = recvState(comm);
  bool ours = rdma::onCreditWriteDone(static_cast<core::RecvComm&>(comm), state, op, error) ||
              onDescriptorWrite(comm, state, op, error);
  // The close notice waited for this write (see onClose).
  if (ours && state.noticeOwed && !descriptorWritesInFlight(state)) sendCloseNotice(comm, state);
  return ours;
}

bool Rdma::onRequestRead(core::DataComm& comm, core::Operation& op, int error) {
  if (comm.kind() != core::Comm::Kind::kRecv || comm.protocolState() == nullptr) return false;
  return rdma::onEagerRead(static_cast<core::RecvComm&>(comm), recvState(comm), op, error);
}

void Rdma::onWaiting(core::DataComm& comm, core::Request& request, uint64_t waitedNs) {
  if (comm.protocolState() == nullptr) return;
  if (comm.kind() == core::Comm::Kind::kSend) {
    // Small sends waiting for descriptors of a receiver gone quiet (kEagerQuietNs) go eagerly:
    // no descriptor and no credit write may come to say so.
    if (waitedNs >= rdma::kEagerQuietNs) {
      sendWaitingEagerly(static_cast<core::SendComm&>(comm), sendState(comm));
    }
    return;
  }
  RecvState& state = recvState(comm);
  uint32_t slot = request.slot;
  if (slot >= rdma::kSlots || (state.undescribed & (1u << slot)) == 0 ||
      state.requestAt(slot) != &request || waitedNs < rdma::kLateDescribeNs) {
    return;
  }
  // Nothing came eagerly: the message may be larger than the buffer, or its sender may have had
  // no entry free, or was away. Described now, it finds its send (and a truncation is refused
  // there); the run goes on.
  rdma::describeLate(static_cast<core::RecvComm&>(comm), state, slot);
}

void Rdma::forget(core::DataComm& comm, core::Request& request) {
  if (comm.protocolState() == nullptr) return;
  if (comm.kind() == core::Comm::Kind::kSend) {
    // A send given up while it waited leaves the list before its request can be used again.
    core::Operation& op = request.ops[0];
    if (!op.inFlight && !op.queued) {
      sendState(comm).matcher.removeWaiting(reinterpret_cast<rdma::WaitLink*>(&op.context));
    }
    return;
  }
  RecvState& state = recvState(comm);
  if (state.requestAt(request.slot) == &request) state.release(request.slot);
}

void Rdma::releaseRegistrations(core::DataComm& comm) {
  if (comm.kind() != core::Comm::Kind::kRecv || comm.protocolState() == nullptr) return;
  recvState(comm).dropAllHandles();
}

int Rdma::ownInFlight(const core::DataComm& comm) const {
  if (comm.protocolState() == nullptr) return 0;
  if (comm.kind() == core::Comm::Kind::kSend) {
    auto& state = *static_cast<SendState*>(comm.protocolState());
    // Queued counts too: a comm freed with an operation in the device's retry queue would
    // leave the queue pointing into freed memory.
    if (state.closedAck.inFlight || state.closedAck.queued) return 1;
    int limit = state.limitWrite.inFlight || state.limitWrite.queued ? 1 : 0;
    return limit + rdma::voidsPending(state) + (ringExposed(comm, state) ? 1 : 0);
  }
  auto& state = *static_cast<RecvState*>(comm.protocolState());
  int count = rdma::bounceExposed(comm, state) ? 1 : 0;
  state.forEachOwn(
      [&count](const core::Operation& op) { count += op.inFlight || op.queued ? 1 : 0; });
  return count;
}

void Rdma::cancelOwn(core::DataComm& comm) {
  if (comm.kind() != core::Comm::Kind::kRecv || comm.protocolState() == nullptr) return;
  core::Device& device = comm.device();
  RecvState& state = recvState(comm);
  state.forEachOwn([&device, &state](core::Operation& op) {
    if (&op != &state.closeNotice) unpost(device, op);
  });
}

void Rdma::onClose(core::DataComm& comm) {
  if (comm.protocolState() == nullptr) return;
  if (comm.kind() == core::Comm::Kind::kSend) {
    // Tell the receiver we write nothing more, once our last write has ended: its close may be
    // waiting for that (our own close notice may never have reached it).
    SendState& state = sendState(comm);
    state.lingerUntilNs = rdma::lingerDeadlineNs(comm);
    if (comm.remoteId() != 0) {
      state.ackOwed = true;
      onWriteDone(comm);
    }
    return;
  }
  RecvState& state = recvState(comm);
  state.lingerUntilNs = rdma::lingerDeadlineNs(comm);
  if (comm.remoteId() == 0 || state.closeNotice.inFlight || state.closeNotice.queued) return;
  // Before the sender's answer, its writes may come into any buffer still described; after it,
  // those it counted that have not landed yet are still on their way.
  if (state.senderDone) {
    state.awaitingAck = !state.allLanded();
  } else {
    for (uint32_t slot = 0; slot < rdma::kSlots; ++slot) {
      if (state.requestAt(slot) != nullptr) state.awaitingAck = true;
    }
  }
  // Descriptor writes cannot be cancelled: the notice follows the last one (onOwnCompletion),
  // so that nothing of ours lands in the sender's ring after it.
  if (descriptorWritesInFlight(state)) {
    state.noticeOwed = true;
    return;
  }
  sendCloseNotice(comm, state);
}

int Rdma::peerWritesPending(const core::DataComm& comm) const {
  if (comm.kind() != core::Comm::Kind::kRecv || comm.protocolState() == nullptr) return 0;
  return static_cast<const RecvState*>(comm.protocolState())->awaitingAck ? 1 : 0;
}

void Rdma::onPeerClosed(core::DataComm& comm) {
  if (comm.kind() != core::Comm::Kind::kSend || comm.protocolState() == nullptr) return;
  SendState& state = sendState(comm);
  state.receiverDone = true;
  state.ackOwed = true;
  onWriteDone(comm);
}

void Rdma::onPeerClosedAck(core::DataComm& comm, const uint8_t* data, size_t length) {
  if (comm.kind() != core::Comm::Kind::kRecv || comm.protocolState() == nullptr) return;
  RecvState& state = recvState(comm);
  state.senderDone = true;
  if (length >= sizeof(rdma::ClosedAck)) {
    memcpy(&state.announced, data, sizeof(state.announced));
  } else {
    NNF_INFO(abi::kLogSubsysNet, "comm %u: the sender's close answer carries no write counts",
             comm.id());
    memcpy(state.announced.written, state.landed, sizeof(state.landed));
  }
  state.awaitingAck = state.awaitingAck && !state.allLanded();
}

void Rdma::onWriteDone(core::DataComm& comm) {
  if (comm.kind() != core::Comm::Kind::kSend || comm.protocolState() == nullptr) return;
  SendState& state = sendState(comm);
  if (!state.ackOwed || comm.callerOpsInFlight() > 0 || state.closedAck.inFlight ||
      state.closedAck.queued || state.limitWrite.inFlight || state.limitWrite.queued ||
      rdma::voidsPending(state) > 0) {
    return;
  }
  state.ackOwed = false;
  // Sent after our last write completed; the receiver's close waits for it (or for our death).
  uint8_t* buffer = state.ring->data + rdma::kNoticeOffset;
  static_assert(sizeof(core::wire::ControlHeader) + sizeof(rdma::ClosedAck) <= rdma::kNoticeBytes);
  comm.device().controlChannel().send(state.closedAck, buffer, state.ring->desc, comm.peer(),
                                      comm.remoteId(), core::wire::ControlKind::kClosedAck,
                                      &state.written, sizeof(state.written));
}

}  // namespace nnf::protocol
