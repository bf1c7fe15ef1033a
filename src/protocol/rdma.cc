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
#include "protocol/rdma_matching.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol {
namespace {

using rdma::Arrived;
using rdma::BufferDescriptor;
static_assert(sizeof(rdma::WaitLink) <= sizeof(fi_context2) &&
              alignof(rdma::WaitLink) <= alignof(fi_context2));

// A comm's slot of the device's rdma arena, handed back when the comm goes.
class ArenaSlot {
 public:
  explicit ArenaSlot(core::ControlArena& arena) : arena_(arena) {}
  ~ArenaSlot() {
    if (!leaked_) arena_.release(&slot_);
  }
  ArenaSlot(const ArenaSlot&) = delete;
  ArenaSlot& operator=(const ArenaSlot&) = delete;
  bool acquire() { return arena_.acquire(&slot_); }
  const core::ControlSlot& operator*() const { return slot_; }
  const core::ControlSlot* operator->() const { return &slot_; }
  // A peer may still write into the slot: it is never handed out again (the arena keeps the
  // memory until the device goes, after its endpoint is closed).
  void leak() { leaked_ = true; }

 private:
  core::ControlArena& arena_;
  core::ControlSlot slot_;
  bool leaked_ = false;
};

// The sender's side: the ring the receiver writes descriptors into, and the matching table.
struct SendState final : CommState {
  explicit SendState(core::ControlArena& arena) : ring(arena) {}
  ArenaSlot ring;  // the receiver's descriptors, then our close acknowledgement
  rdma::SendMatcher matcher;
  size_t nextRail = 0;  // the rail of the next message that goes whole on one
  core::Operation closedAck;
  bool ackOwed = false;       // the receiver closed: answer once no write of ours is in flight
  rdma::ClosedAck written{};  // writes with immediate data completed per rail (the answer says)
  bool warnedReleased = false;
  // The receiver said (kClosed) that it writes no more descriptors into the ring. Until then a
  // closed comm keeps its ring out of the arena: a new comm reusing it would read the old
  // receiver's late descriptors and write into its freed buffers.
  bool receiverDone = false;
  uint64_t lingerUntilNs = 0;  // closed: the ring is given up (leaked) after this (0: never)
};

// The receiver's side: the peer's ring, the descriptors being written from, and its buffers.
struct RecvState final : CommState {
  explicit RecvState(core::ControlArena& arena) : staging(arena) {}
  // The comm goes once its sender acknowledged the close, died, or the close gave up: the
  // registrations NCCL deregistered meanwhile go too (a late write then fails at the provider
  // instead of landing in memory NCCL freed).
  ~RecvState() override { dropAllHandles(); }
  // Descriptor slots come in chunks allocated as receives first need them: most comms keep a
  // few receives in flight, and an idle one holds none.
  static constexpr uint32_t kSlotsPerChunk = 8;
  struct Chunk {
    core::Operation descriptorWrites[kSlotsPerChunk];
    core::Request* requests[kSlotsPerChunk] = {};
    rdma::SlotProgress progress[kSlotsPerChunk];
    // The registrations each slot's buffers were described with (see dropHandles).
    core::MemoryHandle* handles[kSlotsPerChunk][rdma::kGroup] = {};
  };
  ArenaSlot staging;  // the close notice, then the entry of each slot (rdma::entryOffset)
  core::Operation closeNotice;
  bool awaitingAck = false;  // closed with buffers described: the sender may still write
  bool senderDone = false;   // the sender said it writes nothing more (it closed, or we did)
  // Writes of the sender's that landed here per rail, and how many it said it made (kClosedAck):
  // until they match, its writes may still be on their way on some rail.
  uint64_t landed[rdma::kMaxRails] = {};
  rdma::ClosedAck announced{};
  bool allLanded() const {
    for (size_t r = 0; r < rdma::kMaxRails; ++r) {
      if (landed[r] < announced.written[r]) return false;
    }
    return true;
  }
  // Closed while descriptor writes were in flight: the close notice follows the last of them,
  // so that the sender may reuse its ring once the notice has come.
  bool noticeOwed = false;
  uint64_t ringAddress = 0;
  uint64_t ringKey = 0;
  std::unique_ptr<Chunk> chunks[rdma::kSlots / kSlotsPerChunk];
  // Bit s: slot s serves a request. Finding a free slot is then a bit scan, not a walk over
  // every slot on every receive.
  uint32_t taken = 0;
  static_assert(rdma::kSlots == 32, "one bit per slot");

  Chunk* chunkOf(uint32_t slot) const { return chunks[slot / kSlotsPerChunk].get(); }
  core::Operation& write(uint32_t slot) {
    return chunkOf(slot)->descriptorWrites[slot % kSlotsPerChunk];
  }
  core::Request*& request(uint32_t slot) { return chunkOf(slot)->requests[slot % kSlotsPerChunk]; }
  rdma::SlotProgress& progress(uint32_t slot) {
    return chunkOf(slot)->progress[slot % kSlotsPerChunk];
  }
  // The request a slot serves, or null (also for slots of chunks never allocated).
  core::Request* requestAt(uint32_t slot) const {
    Chunk* chunk = slot < rdma::kSlots ? chunkOf(slot) : nullptr;
    return chunk != nullptr ? chunk->requests[slot % kSlotsPerChunk] : nullptr;
  }
  // The lowest free slot whose last descriptor write has completed (allocating its chunk), or
  // kSlots when all are busy or memory ran out.
  uint32_t freeSlot(core::DataComm& comm) {
    for (uint32_t candidates = ~taken; candidates != 0; candidates &= candidates - 1) {
      uint32_t slot = static_cast<uint32_t>(__builtin_ctz(candidates));
      std::unique_ptr<Chunk>& chunk = chunks[slot / kSlotsPerChunk];
      if (!chunk) {
        chunk.reset(new (std::nothrow) Chunk);
        if (!chunk) {
          NNF_WARN("irecv: out of memory for the receive slots of comm %u", comm.id());
          return rdma::kSlots;
        }
        for (core::Operation& op : chunk->descriptorWrites) op.owner = &comm;
      }
      const core::Operation& op = write(slot);
      if (!op.inFlight && !op.queued) return slot;
    }
    return rdma::kSlots;
  }
  void take(uint32_t slot, core::Request& serving) {
    request(slot) = &serving;
    taken |= 1u << slot;
  }
  void release(uint32_t slot) {
    uint32_t described = progress(slot).groupSize();
    progress(slot).disarm();
    request(slot) = nullptr;
    taken &= ~(1u << slot);
    dropHandles(slot, described);
  }
  // The described buffers of the slot's first `count` (set only for a group's buffers) ended:
  // landed, failed, or the comm went. NCCL's deregistration of one, when it came meanwhile,
  // takes effect now.
  void dropHandles(uint32_t slot, uint32_t count = rdma::kGroup) {
    core::MemoryHandle** handles = chunkOf(slot)->handles[slot % kSlotsPerChunk];
    for (uint32_t i = 0; i < count; ++i) {
      if (handles[i] != nullptr) core::endUse(handles[i]);
      handles[i] = nullptr;
    }
  }
  void dropAllHandles() {
    for (uint32_t slot = 0; slot < rdma::kSlots; ++slot) {
      if (chunkOf(slot) != nullptr) dropHandles(slot);
    }
  }
  // The slot whose descriptor write `op` is, or kSlots.
  uint32_t slotOf(const core::Operation& op) const {
    for (uint32_t c = 0; c < rdma::kSlots / kSlotsPerChunk; ++c) {
      const Chunk* chunk = chunks[c].get();
      if (chunk != nullptr && &op >= chunk->descriptorWrites &&
          &op < chunk->descriptorWrites + kSlotsPerChunk) {
        return c * kSlotsPerChunk + static_cast<uint32_t>(&op - chunk->descriptorWrites);
      }
    }
    return rdma::kSlots;
  }
  // Every operation of its own: descriptor writes and the close notice.
  template <typename Visit>
  void forEachOwn(Visit&& visit) {
    visit(closeNotice);
    for (const auto& chunk : chunks) {
      if (!chunk) continue;
      for (core::Operation& op : chunk->descriptorWrites) visit(op);
    }
  }
};

SendState& sendState(core::DataComm& comm) {
  return *static_cast<SendState*>(comm.protocolState());
}
RecvState& recvState(core::DataComm& comm) {
  return *static_cast<RecvState*>(comm.protocolState());
}

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
  if (request == nullptr || error == FI_ECANCELED) return true;
  // No data will come for this request: it fails as one of its buffers would (one WARN a comm).
  request->remaining = 1;
  comm.onError(request->ops[0], error, 0, "writing the receive descriptors to the sender");
  return true;
}

bool ringExposed(const core::DataComm& comm, SendState& state) {
  // The receiver may still write descriptors into the ring until it says it closed; a dead one
  // writes nothing more.
  if (!comm.closed() || state.receiverDone || comm.peerFailed()) return false;
  if (state.lingerUntilNs == 0 || core::nowNs() < state.lingerUntilNs) return true;
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

// The part of a message one rail carries: `length` bytes from `offset`, in `segments` writes.
struct Share {  // no initialisers: planShares fills those it uses (every send pays for them)
  uint64_t offset;
  uint64_t length;
  uint32_t segments;
};

uint32_t segmentsOf(uint64_t length) {
  return length == 0 ? 1
                     : static_cast<uint32_t>((length + rdma::kMaxSegmentBytes - 1) /
                                             rdma::kMaxSegmentBytes);
}

// How a message of `total` bytes goes: whole on one rail below the stripe size (or with one
// rail), else in page-aligned shares over every rail. Returns the number of shares.
uint32_t planShares(uint64_t total, size_t rails, size_t stripeMin, Share* shares) {
  size_t ways = total >= stripeMin && total > 0 ? rails : 1;
  if (ways == 1) {  // most messages: no division on the way
    shares[0] = Share{0, total, segmentsOf(total)};
    return 1;
  }
  uint64_t share = (total + ways - 1) / ways;
  share = (share + rdma::kStripeAlign - 1) / rdma::kStripeAlign * rdma::kStripeAlign;
  uint32_t count = 0;
  for (uint64_t offset = 0; count == 0 || offset < total; offset += share) {
    Share& part = shares[count++];
    part.offset = offset;
    part.length = std::min(share, total - offset);
    part.segments = segmentsOf(part.length);
  }
  return count;
}

// Posts the writes of the send in `request` into the buffer `arrived` describes, one share per
// rail, or tells the receiver that the message does not fit. `handle`: the send's registration
// (null for buffers without one). Failures land in the request.
void startWrite(core::SendComm& comm, core::Request& request, const Arrived& arrived,
                const BufferDescriptor& buffer, core::MemoryHandle* handle) {
  core::Operation& first = request.ops[0];
  core::Device& device = comm.device();
  uint64_t total = first.ignore;
  bool withLength = device.immediateCarriesLength();
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
    first.peer = comm.peer();
    first.remoteAddress = buffer.address;
    first.remoteKey = buffer.keys[0];
    first.length = 0;
    first.ignore = 0;
    first.transferred = 0;
    first.tag = rdma::encodeData(comm.remoteId(), arrived.slot, arrived.index, 0,
                                 static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX)));
    abi::Result result = device.post(first);
    if (result != abi::kSuccess) {
      request.remaining = 0;
      request.error = result;
    }
    return;
  }
  SendState& state = sendState(comm);
  Share shares[rdma::kMaxRails];
  uint32_t count = planShares(total, comm.rails(), device.stripeMinBytes(), shares);
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
    uint64_t segment = std::min(shares[i].length, rdma::kMaxSegmentBytes);
    op.owner = &comm;
    op.type = core::OpType::kWrite;
    op.rail = static_cast<uint8_t>(rail);
    op.peer = comm.peer(rail);
    op.buffer = base + shares[i].offset;
    op.desc = handle != nullptr ? handle->descOn(rail) : nullptr;
    op.length = segment;
    op.ignore = shares[i].length - segment;  // bytes of this share after this segment
    op.transferred = 0;
    op.remoteAddress = buffer.address + shares[i].offset;
    op.remoteKey = buffer.keys[rail];
    op.tag = rdma::encodeData(comm.remoteId(), arrived.slot, arrived.index, segments,
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

// A send that waited holds its memory handle in remoteAddress (see Rdma::postSend); false, and
// the request failed, when NCCL deregistered the buffer meanwhile.
bool takeWaitingHandle(core::SendComm& comm, core::Request& request, core::MemoryHandle** handle) {
  core::Operation& op = request.ops[0];
  *handle = reinterpret_cast<core::MemoryHandle*>(op.remoteAddress);
  if (*handle == nullptr) return true;
  --(*handle)->waitingSends;
  if (!(*handle)->released) return true;
  SendState& state = sendState(comm);
  if (!state.warnedReleased) {  // an abort releases many: one WARN a comm
    state.warnedReleased = true;
    NNF_WARN(
        "send of %llu bytes on comm %u: its buffer was deregistered before the receiver "
        "asked for it; the send fails",
        static_cast<unsigned long long>(op.ignore), comm.id());
  }
  request.state = core::Request::State::kFailed;
  request.error = abi::kInternalError;
  request.remaining = 0;
  return false;
}

}  // namespace

abi::Result Rdma::startSend(core::SendComm& comm, ConnectInfo* info) {
  auto state = std::make_unique<SendState>(*comm.device().rdmaArena());
  if (!state->ring.acquire()) return abi::kSystemError;  // logged by the arena
  info->ringAddress = state->ring->remoteAddress;
  info->ringKey = state->ring->key;
  state->closedAck.owner = &comm;
  comm.setProtocolState(std::move(state));
  return abi::kSuccess;
}

abi::Result Rdma::startRecv(core::RecvComm& comm, const ConnectInfo& info) {
  auto state = std::make_unique<RecvState>(*comm.device().rdmaArena());
  if (!state->staging.acquire()) return abi::kSystemError;
  state->ringAddress = info.ringAddress;
  state->ringKey = info.ringKey;
  state->closeNotice.owner = &comm;
  comm.setProtocolState(std::move(state));
  return abi::kSuccess;
}

abi::Result Rdma::postSend(core::SendComm& comm, core::Request& request, void* data, size_t size,
                           int tag, core::MemoryHandle* handle) {
  uint32_t next;
  if (!comm.nextSequence(tag, &next)) return abi::kInternalError;
  auto seq = static_cast<uint16_t>(next);
  core::Operation& op = request.ops[0];
  op.owner = &comm;
  op.type = core::OpType::kWrite;
  op.buffer = data;
  op.ignore = size;  // the whole message until its descriptor comes
  op.desc = handle != nullptr ? handle->desc : nullptr;
  op.peer = comm.peer();
  // Nothing is with the provider until the descriptor has come: a failure or abort before then
  // returns the request to the pool at once.
  request.remaining = 0;
  SendState& state = sendState(comm);
  op.remoteAddress = 0;  // no waiting: the handle was just checked by isend
  Arrived arrived;
  if (state.matcher.takeDescriptor(tag, seq, &arrived)) {
    const auto* entries = reinterpret_cast<const BufferDescriptor*>(
        state.ring->data + rdma::entryOffset(arrived.slot));
    startWrite(comm, request, arrived, entries[arrived.index], handle);
    comm.holdRegistration(request, handle);
    return request.state == core::Request::State::kFailed && request.error != abi::kInternalError
               ? request.error
               : abi::kSuccess;
  }
  op.tag = waitKey(tag, seq);
  // Until the write starts: NCCL may deregister the buffer meanwhile (deregMr, then close).
  op.remoteAddress = reinterpret_cast<uintptr_t>(handle);
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
  request.slot = static_cast<uint16_t>(slot);
  core::Operation& write = state.write(slot);
  auto* entries =
      reinterpret_cast<BufferDescriptor*>(state.staging->data + rdma::entryOffset(slot));
  uint64_t sizes64[rdma::kGroup];
  core::MemoryHandle* described[rdma::kGroup] = {};
  for (int i = 0; i < count; ++i) {
    uint32_t next;
    if (!comm.nextSequence(tags[i], &next)) return abi::kInternalError;
    core::MemoryHandle* handle = handles != nullptr ? handles[i] : nullptr;
    BufferDescriptor& entry = entries[i];
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
    entry.reserved = 0;
    entry.reserved2 = 0;
    sizes64[i] = sizes[i];
    core::Operation& op = request.ops[i];
    op.owner = &comm;
    op.type = core::OpType::kRecv;  // never posted: the sender's writes complete it
    op.buffer = data[i];
    op.length = sizes[i];
    op.transferred = 0;
    op.tag = core::tags::data(comm.id(), next, tags[i]);
  }
  state.progress(slot).arm(static_cast<uint32_t>(count), sizes64);
  state.take(slot, request);
  for (int i = 0; i < count; ++i) {
    if (described[i] != nullptr) core::beginUse(described[i]);
    state.chunkOf(slot)->handles[slot % RecvState::kSlotsPerChunk][i] = described[i];
  }
  request.remaining = static_cast<uint8_t>(count);

  write.request = nullptr;
  write.type = core::OpType::kWrite;
  write.buffer = entries;
  write.length = static_cast<size_t>(count) * sizeof(BufferDescriptor);
  write.desc = state.staging->desc;
  write.peer = comm.peer();
  write.remoteAddress = state.ringAddress + rdma::entryOffset(slot);
  write.remoteKey = state.ringKey;
  write.tag = rdma::encodeDescriptors(comm.remoteId(), slot, static_cast<uint32_t>(count));
  // Inline where nothing can overtake it (the close notice follows on the same endpoint): no
  // completion to read, and the staging entry is free on return. Refused for room, it is posted.
  abi::Result result = abi::kInProgress;
  if (comm.device().deliversInOrder() && write.length <= comm.device().injectLimit()) {
    result = comm.device().inject(write);
  }
  if (result == abi::kInProgress) result = comm.device().post(write);
  if (result != abi::kSuccess) {
    state.release(slot);
    request.remaining = 0;
  }
  return result;
}

void Rdma::onRemoteWrite(core::Device& device, size_t rail, uint64_t data, size_t length) {
  rdma::Immediate imm = rdma::decode(data);
  core::Comm* comm = device.findComm(imm.commId);
  if (imm.kind == rdma::ImmKind::kDescriptors) {
    if (comm == nullptr || comm->kind() != core::Comm::Kind::kSend || comm->closed()) return;
    auto& sender = static_cast<core::SendComm&>(*comm);
    if (sender.protocolState() == nullptr) return;
    SendState& state = sendState(sender);
    const auto* entries =
        reinterpret_cast<const BufferDescriptor*>(state.ring->data + rdma::entryOffset(imm.slot));
    for (uint32_t i = 0; i < imm.count; ++i) {
      const BufferDescriptor& buffer = entries[i];
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
          startWrite(sender, *request, arrived, buffer, handle);
          sender.holdRegistration(*request, handle);
        }
      } else {
        state.matcher.addDescriptor(arrived);
      }
    }
    return;
  }
  if (comm == nullptr || comm->kind() != core::Comm::Kind::kRecv) return;  // closed meanwhile
  auto& receiver = static_cast<core::RecvComm&>(*comm);
  if (receiver.protocolState() == nullptr) return;
  RecvState& state = recvState(receiver);
  if (rail < rdma::kMaxRails) ++state.landed[rail];
  // The sender's last write has landed: a close waiting for it may end.
  if (state.awaitingAck && state.senderDone && state.allLanded()) state.awaitingAck = false;
  core::Request* request = state.requestAt(imm.slot);
  uint64_t segmentBytes = device.immediateCarriesLength() ? imm.length : length;
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
      break;
    case rdma::SegmentOutcome::kTruncated: {
      core::Operation& op = request->ops[imm.index];
      size_t overflow =
          device.immediateCarriesLength() && imm.length > op.length ? imm.length - op.length : 0;
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
  if (request->remaining == 0) state.release(imm.slot);
}

bool Rdma::onOwnCompletion(core::DataComm& comm, core::Operation& op, int error) {
  if (comm.protocolState() == nullptr) return false;
  if (comm.kind() == core::Comm::Kind::kSend) return &op == &sendState(comm).closedAck;
  RecvState& state = recvState(comm);
  bool ours = onDescriptorWrite(comm, state, op, error);
  // The close notice waited for this write (see onClose).
  if (ours && state.noticeOwed && !descriptorWritesInFlight(state)) sendCloseNotice(comm, state);
  return ours;
}

bool Rdma::continueWrite(core::DataComm& comm, core::Operation& op) {
  // Every write of a request that completes carried immediate data: the receiver counts it.
  if (comm.kind() == core::Comm::Kind::kSend && comm.protocolState() != nullptr &&
      op.rail < rdma::kMaxRails) {
    ++sendState(comm).written.written[op.rail];
  }
  if (op.ignore == 0 || op.request->state != core::Request::State::kActive) return false;
  op.transferred += op.length;
  op.buffer = static_cast<char*>(op.buffer) + op.length;
  op.remoteAddress += op.length;
  op.length = std::min(op.ignore, rdma::kMaxSegmentBytes);
  op.ignore -= op.length;
  if (comm.device().immediateCarriesLength()) {
    op.tag = (op.tag & 0xffffffffu) | (uint64_t{op.length} << rdma::kLengthShift);
  }
  abi::Result result = comm.device().post(op);
  if (result == abi::kSuccess) return true;
  op.request->state = core::Request::State::kFailed;  // logged by the device
  op.request->error = result;
  return false;
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
    return ringExposed(comm, state) ? 1 : 0;
  }
  auto& state = *static_cast<RecvState*>(comm.protocolState());
  int count = 0;
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
    int64_t limitMs = comm.device().config().integer(config::Param::kCloseTimeoutMs);
    state.lingerUntilNs =
        limitMs > 0 ? core::nowNs() + static_cast<uint64_t>(limitMs) * 1000000 : 0;
    if (comm.remoteId() != 0) {
      state.ackOwed = true;
      onWriteDone(comm);
    }
    return;
  }
  RecvState& state = recvState(comm);
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
      state.closedAck.queued) {
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
