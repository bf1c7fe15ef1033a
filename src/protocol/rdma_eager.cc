// The eager path of the rdma protocol (see rdma_eager.h for the design).
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/device.h"
#include "core/memory_handle.h"
#include "log/log.h"
#include "protocol/rdma_state.h"

namespace nnf::protocol::rdma {
namespace {

EagerHeader* headerStaging(SendState& state, uint32_t entry) {
  return reinterpret_cast<EagerHeader*>(state.ring->data + kEagerHeadersOffset +
                                        entry * sizeof(EagerHeader));
}

// Posts owed voids on the free operations.
void postVoids(core::SendComm& comm, VoidWrites& voids) {
  for (core::Operation& op : voids.ops) {
    if (voids.owedSlots == 0) return;
    if (op.inFlight || op.queued) continue;
    auto slot = static_cast<uint32_t>(__builtin_ctz(voids.owedSlots));
    auto index = static_cast<uint32_t>(__builtin_ctz(voids.owed[slot]));
    voids.owed[slot] &= static_cast<uint8_t>(~(1u << index));
    if (voids.owed[slot] == 0) voids.owedSlots &= ~(1u << slot);
    op.owner = &comm;
    op.request = nullptr;
    op.type = core::OpType::kWrite;
    op.rail = 0;
    op.peer = comm.peer();
    op.buffer = nullptr;
    op.length = 0;
    op.desc = nullptr;
    op.headerLength = 0;
    op.remoteAddress = voids.address[slot];
    op.remoteKey = voids.key[slot];
    op.tag = encodeVoid(comm.remoteId(), slot, index);
    // A failure is the device's to log; the receiver then keeps that slot until it closes.
    comm.device().post(op);
  }
}

// Entries freed since the sender last heard, told by one write of the grant with immediate
// data: once the comm's first message has landed (none freed), then every kCreditBatch freed.
void sendCredits(core::RecvComm& comm, RecvState& state) {
  core::Operation& write = state.creditWrite;
  if (write.inFlight || write.queued) {
    state.creditsOwed = true;
    return;
  }
  state.creditsOwed = false;
  uint64_t freed = state.inbox.freed();
  write.owner = &comm;
  write.request = nullptr;
  write.type = core::OpType::kWrite;
  write.rail = 0;
  write.peer = comm.peer();
  write.buffer = state.staging->data + kGrantOffset;
  write.length = sizeof(Grant);
  write.desc = state.staging->desc;
  write.headerLength = 0;
  write.remoteAddress = state.ringAddress + kGrantOffset;
  write.remoteKey = state.ringKey;
  write.tag = encodeCredits(comm.remoteId(), static_cast<uint32_t>(freed & 0xff));
  // A failure is logged by the device; the sender goes on with what it was granted.
  if (writeOwn(comm.device(), write) == abi::kSuccess) state.creditsReported = freed;
}

void freeEntry(core::RecvComm& comm, RecvState& state, uint32_t entry) {
  uint64_t freed = state.inbox.free(entry);
  if (!comm.closed() && freed - state.creditsReported >= kCreditBatch) {
    sendCredits(comm, state);
  }
}

// The described buffer (slot, index) of (tag, seq), or false.
bool findDescribed(RecvState& state, int32_t tag, uint16_t seq, uint32_t* slotOut,
                   uint32_t* indexOut) {
  for (uint32_t busy = state.taken; busy != 0; busy &= busy - 1) {
    uint32_t slot = static_cast<uint32_t>(__builtin_ctz(busy));
    if (state.requestAt(slot) == nullptr) continue;
    const auto* entries =
        reinterpret_cast<const BufferDescriptor*>(state.staging->data + entryOffset(slot));
    uint32_t count = state.progress(slot).groupSize();
    for (uint32_t i = 0; i < count; ++i) {
      if (entries[i].tag == tag && entries[i].seq == seq && (entries[i].flags & kSettled) == 0) {
        *slotOut = slot;
        *indexOut = i;
        return true;
      }
    }
  }
  return false;
}

// What an inline write of the send in `request` came to: true when the send ended with it (done,
// its `size` bytes counted, or failed); false when the provider had no room (kInProgress).
bool endedByInject(abi::Result injected, SendState& state, core::Request& request, size_t size) {
  if (injected == abi::kInProgress) return false;
  if (injected == abi::kSuccess) {
    ++state.written.written[0];
    request.ops[0].transferred = size;
    request.state = core::Request::State::kDone;
  } else {
    request.state = core::Request::State::kFailed;
    request.error = injected;
  }
  return true;
}

}  // namespace

bool sendEager(core::SendComm& comm, SendState& state, core::Request& request, int32_t tag,
               uint16_t seq, core::MemoryHandle* handle) {
  core::Operation& op = request.ops[0];
  size_t size = op.pendingSend.bytes;
  core::Device& device = comm.device();
  // Without a registration the message can go only where the provider needs no descriptor.
  if (handle == nullptr && size > 0 && device.rail().needsLocalRegistration()) return false;
  bool hostBuffer = handle == nullptr || handle->type == memory::MemType::kHost;
  if (!hostBuffer && !state.rdma.eagerFromGpuMemory()) {
    // The provider would copy the GPU message with the CPU (ProviderRules::writesMixedMemoryIovs):
    // it waits for its descriptor. A receiver that leaves small receives undescribed for us
    // hears that we send nothing eagerly (a comm's buffers are all GPU or all host in NCCL).
    if (state.eagerAhead && state.eagerMaxBytes > 0) {
      state.eagerMaxBytes = 0;
      announceEagerLimit(comm, state);
    }
    return false;
  }
  if (!state.voids) return false;  // none could be allocated at the grant: no eager sends
  uint32_t entry;
  if (!state.credits.take(&entry)) return false;
  EagerHeader* header = headerStaging(state, entry);
  *header = EagerHeader{tag, seq, 0, static_cast<uint32_t>(size), 0};
  op.rail = 0;  // the bounce area is registered on the leader
  op.peer = comm.peer();
  op.desc = handle != nullptr ? handle->descOn(0) : nullptr;
  op.length = size;
  op.segment.shareLeft = 0;  // one segment: nothing to post after it
  op.transferred = 0;
  op.header = header;
  op.headerDesc = state.ring->desc;
  op.headerLength = sizeof(EagerHeader);
  op.remoteAddress = state.grant.address + bounceEntryOffset(entry, state.grant.payload);
  op.remoteKey = state.grant.key;
  op.tag = encodeEager(comm.remoteId(), entry);
  request.count = 1;
  request.remaining = 0;
  if (hostBuffer && sizeof(EagerHeader) + size <= device.injectLimit()) {
    // Header and message gathered into one buffer and written inline: no completion to read.
    core::Operation gathered = op;
    uint8_t* scratch = state.rdma.injectScratch();
    memcpy(scratch, header, sizeof(EagerHeader));
    if (size > 0) memcpy(scratch + sizeof(EagerHeader), op.buffer, size);
    gathered.headerLength = 0;
    gathered.buffer = scratch;
    gathered.length = sizeof(EagerHeader) + size;
    abi::Result injected = device.inject(gathered);
    if (injected == abi::kSuccess) {
      state.headerSaid = true;
      state.lastHeaderTag = tag;
    }
    if (endedByInject(injected, state, request, size)) return true;
  }
  if (hostBuffer && state.headerAhead && size <= device.injectLimit() && state.headerSaid &&
      state.lastHeaderTag == tag && state.rdma.immediateCarriesLength()) {
    // The receiver knows the tag from the last header (in order, every write lands after the
    // ones before it), and the immediate carries the rest: one inline write.
    core::Operation message = op;
    message.headerLength = 0;
    message.remoteAddress += sizeof(EagerHeader);
    message.tag = encodeEagerImplied(comm.remoteId(), entry, seq, static_cast<uint16_t>(size));
    if (endedByInject(device.inject(message), state, request, size)) return true;
  }
  if (hostBuffer && state.headerAhead && size <= device.injectLimit()) {
    // A 4 KiB message on shm: a posted write of it would complete only once the receiver runs.
    // The header goes inline first, with an immediate of its own, then the message inline; the
    // provider delivers them in order, so the header is there when the message is read.
    core::Operation head = op;
    head.headerLength = 0;
    head.buffer = header;
    head.length = sizeof(EagerHeader);
    head.tag = encodeEagerHeader(comm.remoteId(), entry);
    abi::Result injected = device.inject(head);
    if (injected == abi::kSuccess) {
      ++state.written.written[0];
      state.headerSaid = true;
      state.lastHeaderTag = tag;
      core::Operation message = op;
      message.headerLength = 0;
      message.remoteAddress += sizeof(EagerHeader);
      // Refused after its header (kInProgress): the posted write below carries the same header
      // again.
      injected = device.inject(message);
    }
    if (endedByInject(injected, state, request, size)) return true;
  }
  // A posted write may still fail: the receiver may never read its header.
  state.headerSaid = false;
  abi::Result result = device.post(op);
  if (result != abi::kSuccess) {
    request.state = core::Request::State::kFailed;
    request.error = result;
    return true;
  }
  request.remaining = 1;
  comm.holdRegistration(request, handle);
  return true;
}

void onCredits(core::SendComm& comm, SendState& state, uint32_t freedMod256) {
  bool first = !state.credits.granted();
  if (first) {
    // Every credit write carries the grant: whichever lands first describes the area.
    memcpy(&state.grant, state.ring->data + kGrantOffset, sizeof(state.grant));
    state.eagerMaxBytes = std::min<size_t>(state.rdma.eagerMaxBytes(), state.grant.payload);
    if (state.grant.entries != kEagerEntries) state.eagerMaxBytes = 0;  // not ours to guess
    if (state.eagerMaxBytes > 0 && !state.voids) {
      // An eager message's descriptor may cross it: the void writes that answer it are taken
      // with the grant, once a comm (receivers grant after a comm's first message, so most of
      // 10,000 idle comms hold none), not by the first eager send on the data path.
      state.voids.reset(new (std::nothrow) VoidWrites);
      if (!state.voids) state.eagerMaxBytes = 0;  // the answer below says so
    }
  }
  state.credits.onCredits(freedMod256);
  if (first) announceEagerLimit(comm, state);
}

void announceEagerLimit(core::SendComm& comm, SendState& state) {
  core::Operation& write = state.limitWrite;
  // One answer in flight at a time: a second (the limit dropped to 0) is rare enough to skip.
  if (write.inFlight || write.queued || state.receiverDone || !state.credits.granted()) return;
  write.owner = &comm;
  write.request = nullptr;
  write.type = core::OpType::kWrite;
  write.rail = 0;
  write.peer = comm.peer();
  write.buffer = nullptr;
  write.length = 0;
  write.desc = nullptr;
  write.headerLength = 0;
  write.remoteAddress = state.grant.address;  // nothing is written: any valid target does
  write.remoteKey = state.grant.key;
  write.tag = encodeEagerLimit(comm.remoteId(), state.eagerMaxBytes);
  // A failure is the device's to log: the receiver then describes late what never comes.
  if (writeOwn(comm.device(), write) != abi::kSuccess) return;
  if (!write.inFlight && !write.queued) ++state.written.written[0];  // inline: done already
}

bool onLimitWriteDone(core::SendComm& comm, SendState& state, core::Operation& op, int error) {
  if (&op != &state.limitWrite) return false;
  if (error == 0) ++state.written.written[0];  // the receiver counts what lands
  return true;
}

void sendVoid(core::SendComm& comm, SendState& state, uint32_t slot, uint32_t index,
              const BufferDescriptor& buffer) {
  // Without a grant (no voids taken) no send went eagerly, and a failed send's descriptor may stay
  // unanswered: nothing comes for that buffer either way.
  if (slot >= kSlots || index >= kGroup || state.receiverDone || !state.voids) return;
  VoidWrites& voids = *state.voids;
  voids.owed[slot] |= static_cast<uint8_t>(1u << index);
  voids.owedSlots |= 1u << slot;
  voids.address[slot] = buffer.address;
  voids.key[slot] = buffer.keys[0];
  postVoids(comm, voids);
  // The receiver reuses the slot only after the void: a sender whose last send has ended may
  // not be called again before that receiver's next irecv needs the slot.
  comm.device().keepProgressing();
}

bool onVoidDone(core::SendComm& comm, SendState& state, core::Operation& op, int error) {
  if (!state.voids || &op < state.voids->ops || &op >= state.voids->ops + VoidWrites::kOps) {
    return false;
  }
  if (error == 0) ++state.written.written[0];  // the receiver counts what lands
  if (!state.receiverDone) postVoids(comm, *state.voids);
  return true;
}

int voidsPending(const SendState& state) {
  if (!state.voids) return 0;
  int count = state.voids->owedSlots != 0 && !state.receiverDone ? 1 : 0;
  for (const core::Operation& op : state.voids->ops) count += op.inFlight || op.queued ? 1 : 0;
  return count;
}

// Describes the undescribed receive of `slot` now, with kEagerAhead: the receiver's run of
// undescribed small receives goes on, so the sender keeps sending small messages eagerly.
void describeLate(core::RecvComm& comm, RecvState& state, uint32_t slot) {
  state.undescribed &= ~(1u << slot);
  auto* entries = reinterpret_cast<BufferDescriptor*>(state.staging->data + entryOffset(slot));
  entries[0].flags |= kEagerAhead;
  if (writeDescriptors(comm, state, slot, state.progress(slot).groupSize()) == abi::kSuccess) {
    return;
  }
  core::Request* request = state.request(slot);
  state.release(slot);
  if (request != nullptr) failUndescribed(comm, *request, FI_EIO);
}

// The sender's answer to the grant: it sends messages up to `maxBytes` eagerly. Undescribed
// receives for larger ones are described now rather than after kLateDescribeNs.
void onEagerLimit(core::RecvComm& comm, RecvState& state, size_t maxBytes) {
  if (maxBytes >= state.senderEagerMax) return;
  state.senderEagerMax = maxBytes;
  if (maxBytes < state.bouncePayload) {
    NNF_INFO(abi::kLogSubsysNet,
             "comm %u: its sender sends messages up to %zu bytes eagerly; larger receives are "
             "described",
             comm.id(), maxBytes);
  }
  for (uint32_t waiting = state.undescribed; waiting != 0; waiting &= waiting - 1) {
    auto slot = static_cast<uint32_t>(__builtin_ctz(waiting));
    core::Request* request = state.requestAt(slot);
    if (request != nullptr && request->ops[0].length > maxBytes) describeLate(comm, state, slot);
  }
}

void grantEager(core::RecvComm& comm, RecvState& state) {
  state.eagerTried = true;
  RdmaDevice& rdma = state.rdma;
  if (state.bounce.held() || rdma.eagerArena() == nullptr || rdma.eagerMaxBytes() == 0) return;
  if (!state.bounce.acquire()) return;  // logged by the arena; the comm works without eager
  state.bouncePayload = rdma.eagerMaxBytes();
  auto* grant = reinterpret_cast<Grant*>(state.staging->data + kGrantOffset);
  *grant = Grant{state.bounce->remoteAddress, state.bounce->key, kEagerEntries,
                 static_cast<uint32_t>(state.bouncePayload), 0};
  state.creditWrite.owner = &comm;
  sendCredits(comm, state);
}

void deliverEager(core::RecvComm& comm, RecvState& state, core::Request& request, uint32_t index,
                  uint32_t entry, core::MemoryHandle* handle) {
  core::Operation& op = request.ops[index];
  const EagerInbox::Entry& held = state.inbox.at(entry);
  size_t length = held.length;
  const uint8_t* payload = state.entry(entry) + sizeof(EagerHeader);
  if (length > op.length) {
    comm.onError(op, FI_ETRUNC, length - op.length, "eager message larger than the receive buffer");
    freeEntry(comm, state, entry);
    return;
  }
  core::Device& device = comm.device();
  if (handle != nullptr && handle->type != memory::MemType::kHost && length > 0) {
    // GPU memory: the NIC copies it (a read from our own endpoint), no CUDA call here.
    op.type = core::OpType::kRead;
    op.rail = 0;
    op.peer = device.selfAddress();
    op.desc = handle->descOn(0);
    op.length = length;
    op.headerLength = 0;
    op.remoteAddress = state.bounce->remoteAddress + (payload - state.bounce->data);
    op.remoteKey = state.bounce->key;
    op.eagerCopy = core::EagerCopy{entry, true};  // onEagerRead frees it
    state.inbox.copying(entry);
    if (device.post(op) != abi::kSuccess) {  // logged by the device
      op.eagerCopy.copying = false;
      comm.onError(op, FI_EIO, 0, "copying an eager message into GPU memory");
      freeEntry(comm, state, entry);
    }
    return;
  }
  if (length > 0) memcpy(op.buffer, payload, length);
  freeEntry(comm, state, entry);
  comm.onComplete(op, length);
}

void onEagerLanded(core::RecvComm& comm, RecvState& state, uint32_t entry,
                   const EagerHeader* implied) {
  if (!state.bounce.held() || entry >= kEagerEntries) return;
  EagerHeader header;
  if (implied == nullptr) {
    memcpy(&header, state.entry(entry), sizeof(header));
    state.headerSeen = true;
    state.lastHeaderTag = header.tag;
  } else if (state.headerSeen) {
    header = *implied;
    header.tag = state.lastHeaderTag;
  } else {
    NNF_WARN("comm %u: an eager message without a header before any header; dropped", comm.id());
    return;
  }
  if (header.length > state.bouncePayload ||
      !state.inbox.land(entry, header.tag, header.seq, header.length)) {
    NNF_WARN(
        "comm %u: an eager message in bounce entry %u that is not free or too long (%u "
        "bytes); dropped",
        comm.id(), entry, header.length);
    return;
  }
  if (comm.closed()) {
    freeEntry(comm, state, entry);
    return;
  }
  // Not received yet: it waits for its irecv.
  if (!behind(header.seq, comm.sequences().peek(header.tag))) return;  // waits for its irecv
  uint32_t slot, index;
  if (!findDescribed(state, header.tag, header.seq, &slot, &index)) {
    freeEntry(comm, state, entry);  // its receive failed or was given up
    return;
  }
  core::Request& request = *state.request(slot);
  bool described = (state.undescribed & (1u << slot)) == 0;
  rdma::SegmentOutcome outcome = state.progress(slot).onEager(index, header.length, described);
  if (outcome == SegmentOutcome::kInvalid) {
    freeEntry(comm, state, entry);
    return;
  }
  core::MemoryHandle* handle =
      state.chunkOf(slot)->handles[slot % RecvState::kSlotsPerChunk][index];
  deliverEager(comm, state, request, index, entry, handle);
  if (request.remaining == 0 && state.requestAt(slot) == &request) state.finish(slot);
}

void onVoidLanded(core::RecvComm& comm, RecvState& state, uint32_t slot, uint32_t index) {
  if (slot >= kSlots || (state.taken & (1u << slot)) == 0) return;
  if (!state.progress(slot).onVoid(index)) return;
  // The slot's request ended already and this was its last void.
  if (state.requestAt(slot) == nullptr && !state.progress(slot).voidsOwed()) state.release(slot);
}

bool onCreditWriteDone(core::RecvComm& comm, RecvState& state, core::Operation& op, int error) {
  if (&op != &state.creditWrite) return false;
  if (error != 0) return true;  // logged by the device; the sender goes on with descriptors
  if (state.creditsOwed && !comm.closed()) sendCredits(comm, state);
  return true;
}

bool onEagerRead(core::RecvComm& comm, RecvState& state, core::Operation& op, int error) {
  // Flushes are reads too, of requests of their own.
  if (op.request == nullptr || comm.flushPool().owns(op.request) || !op.eagerCopy.copying) {
    return false;
  }
  uint32_t entry = op.eagerCopy.entry;
  op.eagerCopy.copying = false;
  if (error == 0) op.transferred = op.length;
  freeEntry(comm, state, entry);
  core::Request& request = *op.request;
  // The last buffer of a described group: its slot may go (onComplete counts it down next).
  if (request.remaining == 1 && state.requestAt(request.slot) == &request) {
    state.finish(request.slot);
  }
  return true;
}

bool bounceExposed(const core::DataComm& comm, RecvState& state) {
  if (!state.bounce.held() || state.bounce.leaked() || !comm.closed() || comm.peerFailed()) {
    return false;
  }
  if (state.senderDone && state.allLanded()) return false;
  if (lingering(state.lingerUntilNs)) return true;
  // A live sender that never answered our close: the area never returns to the arena.
  state.bounce.leak();
  NNF_INFO(abi::kLogSubsysNet,
           "comm %u: the sender did not answer the close within NCCL_FABRIC_CLOSE_TIMEOUT_MS; "
           "its eager bounce area is set aside rather than reused",
           comm.id());
  return false;
}

}  // namespace nnf::protocol::rdma
