// The per-comm state of the rdma protocol (protocol/rdma.h): the sender's descriptor ring and
// matching table, the receiver's descriptor slots, and both sides of the eager path.
#pragma once

#include <cstdint>
#include <memory>
#include <new>

#include "core/clock.h"
#include "core/control_arena.h"
#include "core/data_comm.h"
#include "core/device.h"
#include "core/memory_registry.h"
#include "core/operation.h"
#include "core/recv_comm.h"
#include "core/send_comm.h"
#include "log/log.h"
#include "core/protocol.h"
#include "protocol/rdma_eager.h"
#include "protocol/rdma_matching.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

// A comm's slot of the device's rdma arena, handed back when the comm goes.
class ArenaSlot {
 public:
  explicit ArenaSlot(core::ControlArena* arena) : arena_(arena) {}
  ~ArenaSlot() {
    if (!leaked_ && arena_ != nullptr) arena_->release(&slot_);
  }
  ArenaSlot(const ArenaSlot&) = delete;
  ArenaSlot& operator=(const ArenaSlot&) = delete;
  bool acquire() { return arena_ != nullptr && arena_->acquire(&slot_); }
  bool held() const { return slot_.data != nullptr; }
  bool leaked() const { return leaked_; }
  const core::ControlSlot& operator*() const { return slot_; }
  const core::ControlSlot* operator->() const { return &slot_; }
  // A peer may still write into the slot: it is never handed out again (the arena keeps the
  // memory until the device goes, after its endpoint is closed).
  void leak() { leaked_ = true; }

 private:
  core::ControlArena* arena_;
  core::ControlSlot slot_;
  bool leaked_ = false;
};

// The sender's side: the ring the receiver writes descriptors into, and the matching table.
// Void writes (see rdma_eager.h), taken by the comm's first eager send: a few operations, and
// the voids owed per slot (a bit per buffer) that wait for one of them.
struct VoidWrites {
  static constexpr size_t kOps = 4;
  core::Operation ops[kOps];
  uint8_t owed[kSlots] = {};
  uint32_t owedSlots = 0;         // bit s: owed[s] != 0
  uint64_t address[kSlots] = {};  // a buffer of the slot's group: where the empty write goes
  uint64_t key[kSlots] = {};
};

struct SendState final : CommState {
  explicit SendState(core::ControlArena* arena) : ring(arena) {}
  ArenaSlot ring;  // our close acknowledgement, the eager grant and headers, the descriptors
  SendMatcher matcher;
  EagerCredits credits;
  Grant grant{};             // the receiver's bounce area (read at its first credit write)
  size_t eagerMaxBytes = 0;  // ours and the receiver's entries' size, the smaller
  // The provider completes only inline writes while the receiver is busy (shm) and delivers in
  // order: a message that fits the inject size without its header goes as two inline writes.
  bool headerAhead = false;
  // The tag of the last eager header the receiver surely got (written inline): a message of the
  // same tag that needs its header ahead goes without it (control 6), one write instead of two.
  bool headerSaid = false;
  int32_t lastHeaderTag = 0;
  uint64_t lastDescriptorNs = 0;  // when the receiver's descriptors last came (every 8th group)
  uint64_t descriptorGroups = 0;
  // Sends went eagerly because the receiver was quiet: the next descriptor group ends that (its
  // arrival is stamped whatever its number), so that sends stop crossing descriptors at once.
  bool quietOpen = false;
  // Our answer to the receiver's grant: the largest message we send eagerly (kEagerLimit).
  core::Operation limitWrite;
  // The receiver's last descriptor group said kEagerAhead: its small receives may go undescribed.
  bool eagerAhead = false;
  std::unique_ptr<VoidWrites> voids;
  size_t nextRail = 0;  // the rail of the next message that goes whole on one
  core::Operation closedAck;
  bool ackOwed = false;  // the receiver closed: answer once no write of ours is in flight
  ClosedAck written{};   // writes with immediate data completed per rail (the answer says)
  bool warnedReleased = false;
  // The receiver said (kClosed) that it writes no more descriptors into the ring. Until then a
  // closed comm keeps its ring out of the arena: a new comm reusing it would read the old
  // receiver's late descriptors and write into its freed buffers.
  bool receiverDone = false;
  uint64_t lingerUntilNs = 0;  // closed: the ring is given up (leaked) after this (0: never)
};

// The receiver's side: the peer's ring, the descriptors being written from, and its buffers.
struct RecvState final : CommState {
  RecvState(core::ControlArena* arena, core::ControlArena* eagerArena)
      : staging(arena), bounce(eagerArena) {}
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
    SlotProgress progress[kSlotsPerChunk];
    // The registrations each slot's buffers were described with (see dropHandles).
    core::MemoryHandle* handles[kSlotsPerChunk][kGroup] = {};
  };
  ArenaSlot staging;  // the close notice, then the entry of each slot (entryOffset)
  core::Operation closeNotice;
  // The eager path: the bounce area (taken by the first receive), what its entries hold, and
  // the credit write that returns freed entries to the sender.
  ArenaSlot bounce;
  size_t bouncePayload = 0;  // bytes of message an entry holds
  bool eagerTried = false;   // grantEager ran (once a comm, whether it could grant or not)
  bool firstLanded = false;  // a message landed: later receives that fit an entry take the area
  EagerInbox inbox;
  // The tag of the last eager header read (its sender's next headerless message has it).
  bool headerSeen = false;
  int32_t lastHeaderTag = 0;
  core::Operation creditWrite;
  uint64_t creditsReported = 0;  // entries freed as the sender last heard
  // Small receives go undescribed once the sender was told so (kEagerAhead on the last group
  // described): bit s, slot s serves one; it is described late if nothing came for it.
  uint32_t undescribed = 0;
  bool eagerAheadSaid = false;
  // The largest message the sender sends eagerly, as it answered the grant (kEagerLimit; until
  // then, as large as an entry): a receive above it is described.
  size_t senderEagerMax = ~size_t{0};
  bool creditsOwed = false;    // a credit write is due once the one in flight completes
  uint64_t lingerUntilNs = 0;  // closed: the bounce area is set aside after this (0: never)
  uint8_t* entry(uint32_t e) { return bounce->data + bounceEntryOffset(e, bouncePayload); }
  bool awaitingAck = false;  // closed with buffers described: the sender may still write
  bool senderDone = false;   // the sender said it writes nothing more (it closed, or we did)
  // Writes of the sender's that landed here per rail, and how many it said it made (kClosedAck):
  // until they match, its writes may still be on their way on some rail.
  uint64_t landed[kMaxRails] = {};
  ClosedAck announced{};
  bool allLanded() const {
    for (size_t r = 0; r < kMaxRails; ++r) {
      if (landed[r] < announced.written[r]) return false;
    }
    return true;
  }
  // Closed while descriptor writes were in flight: the close notice follows the last of them,
  // so that the sender may reuse its ring once the notice has come.
  bool noticeOwed = false;
  uint64_t ringAddress = 0;
  uint64_t ringKey = 0;
  std::unique_ptr<Chunk> chunks[kSlots / kSlotsPerChunk];
  // Bit s: slot s serves a request. Finding a free slot is then a bit scan, not a walk over
  // every slot on every receive.
  uint32_t taken = 0;
  static_assert(kSlots == 32, "one bit per slot");

  Chunk* chunkOf(uint32_t slot) const { return chunks[slot / kSlotsPerChunk].get(); }
  core::Operation& write(uint32_t slot) {
    return chunkOf(slot)->descriptorWrites[slot % kSlotsPerChunk];
  }
  core::Request*& request(uint32_t slot) { return chunkOf(slot)->requests[slot % kSlotsPerChunk]; }
  SlotProgress& progress(uint32_t slot) { return chunkOf(slot)->progress[slot % kSlotsPerChunk]; }
  // The request a slot serves, or null (also for slots of chunks never allocated).
  core::Request* requestAt(uint32_t slot) const {
    Chunk* chunk = slot < kSlots ? chunkOf(slot) : nullptr;
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
          return kSlots;
        }
        for (core::Operation& op : chunk->descriptorWrites) op.owner = &comm;
      }
      const core::Operation& op = write(slot);
      if (!op.inFlight && !op.queued) return slot;
    }
    return kSlots;
  }
  // The slot's request ended: the slot is free again, or, while the sender's voids for it are
  // still to come (it may not have read the slot's descriptors), waits for them without it.
  void finish(uint32_t slot) {
    if (progress(slot).voidsOwed()) {
      request(slot) = nullptr;
    } else {
      release(slot);
    }
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
    undescribed &= ~(1u << slot);
    dropHandles(slot, described);
  }
  // The described buffers of the slot's first `count` (set only for a group's buffers) ended:
  // landed, failed, or the comm went. NCCL's deregistration of one, when it came meanwhile,
  // takes effect now.
  void dropHandles(uint32_t slot, uint32_t count = kGroup) {
    core::MemoryHandle** handles = chunkOf(slot)->handles[slot % kSlotsPerChunk];
    for (uint32_t i = 0; i < count; ++i) {
      if (handles[i] != nullptr) core::endUse(handles[i]);
      handles[i] = nullptr;
    }
  }
  void dropAllHandles() {
    for (uint32_t slot = 0; slot < kSlots; ++slot) {
      if (chunkOf(slot) != nullptr) dropHandles(slot);
    }
  }
  // The slot whose descriptor write `op` is, or kSlots.
  uint32_t slotOf(const core::Operation& op) const {
    for (uint32_t c = 0; c < kSlots / kSlotsPerChunk; ++c) {
      const Chunk* chunk = chunks[c].get();
      if (chunk != nullptr && &op >= chunk->descriptorWrites &&
          &op < chunk->descriptorWrites + kSlotsPerChunk) {
        return c * kSlotsPerChunk + static_cast<uint32_t>(&op - chunk->descriptorWrites);
      }
    }
    return kSlots;
  }
  // Every operation of its own: descriptor writes and the close notice.
  template <typename Visit>
  void forEachOwn(Visit&& visit) {
    visit(closeNotice);
    visit(creditWrite);
    for (const auto& chunk : chunks) {
      if (!chunk) continue;
      for (core::Operation& op : chunk->descriptorWrites) visit(op);
    }
  }
};

inline SendState& sendState(core::DataComm& comm) {
  return *static_cast<SendState*>(comm.protocolState());
}
inline RecvState& recvState(core::DataComm& comm) {
  return *static_cast<RecvState*>(comm.protocolState());
}

// A comm's own write into its peer's ring (descriptors, credits): inline where nothing can
// overtake it (the close notice follows on the same endpoint), so no completion is read and the
// source is free on return; posted where the provider delivers out of order or has no room.
inline abi::Result writeOwn(core::Device& device, core::Operation& write) {
  abi::Result result = abi::kInProgress;
  if (device.deliversInOrder() && write.length <= device.injectLimit()) {
    result = device.inject(write);
  }
  return result == abi::kInProgress ? device.post(write) : result;
}

// When a closing comm stops keeping its ring or bounce area for a peer that does not answer
// (NCCL_FABRIC_CLOSE_TIMEOUT_MS from now; 0: never), and whether that time is still ahead.
inline uint64_t lingerDeadlineNs(const core::DataComm& comm) {
  int64_t limitMs = comm.device().config().integer(config::Param::kCloseTimeoutMs);
  return limitMs > 0 ? core::nowNs() + static_cast<uint64_t>(limitMs) * 1000000 : 0;
}
inline bool lingering(uint64_t deadlineNs) {
  return deadlineNs == 0 || core::nowNs() < deadlineNs;
}

// --- shared by the protocol's files; device lock held ---

// Receiver (rdma.cc). Writes the descriptors of `count` buffers staged for `slot` into the
// sender's ring.
abi::Result writeDescriptors(core::RecvComm& comm, RecvState& state, uint32_t slot, uint32_t count);
// The descriptors of `request` (its slot released) could not be written: no data will come for
// it, so it fails as one of its buffers would (one WARN a comm).
void failUndescribed(core::DataComm& comm, core::Request& request, int error);

// Sender (rdma_write.cc). Posts the writes of the send in `request` into the buffer `arrived`
// describes, one share per rail, or tells the receiver that the message does not fit. `handle`:
// the send's registration (null for buffers without one). Failures land in the request.
void startWrite(core::SendComm& comm, core::Request& request, const Arrived& arrived,
                const BufferDescriptor& buffer, core::MemoryHandle* handle);

// --- the eager path (rdma_eager.cc); device lock held ---

// Whether sends may go eagerly now: the receiver granted its entries, and either said that its
// small receives go undescribed or has been quiet (no descriptor for kEagerQuietNs: it is busy
// elsewhere, or descheduled; SendState::quietOpen until its next descriptors come).
inline bool eagerOpen(SendState& state) {
  if (state.eagerMaxBytes == 0 || !state.credits.granted()) return false;
  if (state.eagerAhead) return true;
  if (core::nowNs() - state.lastDescriptorNs < kEagerQuietNs) return false;
  state.quietOpen = true;
  return true;
}

// Whether a send of `size` bytes may go eagerly now (sendEager's precondition).
inline bool mayGoEagerly(SendState& state, size_t size) {
  return size <= state.eagerMaxBytes && eagerOpen(state);
}

// Sender. Writes the send in `request` (its operation filled by postSend; mayGoEagerly checked)
// into the next bounce entry when one is free: true when it went (the request then says how),
// false when the send must wait for its descriptor.
bool sendEager(core::SendComm& comm, SendState& state, core::Request& request, int32_t tag,
               uint16_t seq, core::MemoryHandle* handle);
void onCredits(core::SendComm& comm, SendState& state, uint32_t freedMod256);
// Tells the receiver the largest message we send eagerly (at its grant, and if that drops to 0).
void announceEagerLimit(core::SendComm& comm, SendState& state);
// The limit write ended: true when `op` was it.
bool onLimitWriteDone(core::SendComm& comm, SendState& state, core::Operation& op, int error);
// Answers a descriptor whose message went eagerly: the receiver may then reuse its slot.
void sendVoid(core::SendComm& comm, SendState& state, uint32_t slot, uint32_t index,
              const BufferDescriptor& buffer);
// A void write ended: true when `op` was one.
bool onVoidDone(core::SendComm& comm, SendState& state, core::Operation& op, int error);
int voidsPending(const SendState& state);

// Receiver. Takes the bounce area and grants its entries (postRecv: the first receive an entry
// could fill after the comm's first message landed).
void grantEager(core::RecvComm& comm, RecvState& state);
// Whether a receive of `count` buffers can be filled by an eager message instead of its
// descriptor: one host buffer that fits a bounce entry. Such a receive goes undescribed once the
// sender was told so (RecvState::eagerAheadSaid).
inline bool eagerFillable(const RecvState& state, int count, size_t size,
                          const core::MemoryHandle* handle) {
  return count == 1 && state.bounce.held() && size <= state.bouncePayload &&
         size <= state.senderEagerMax &&
         (handle == nullptr || handle->type == memory::MemType::kHost);
}
// Copies the message in bounce `entry` into buffer `index` of `request` (memcpy, or an RDMA
// read into GPU memory, which completes the buffer later) and frees the entry.
void deliverEager(core::RecvComm& comm, RecvState& state, core::Request& request, uint32_t index,
                  uint32_t entry, core::MemoryHandle* handle);
// An eager message landed in `entry`; `implied`: its header, where it came without one.
void onEagerLanded(core::RecvComm& comm, RecvState& state, uint32_t entry,
                   const EagerHeader* implied = nullptr);
void onVoidLanded(core::RecvComm& comm, RecvState& state, uint32_t slot, uint32_t index);
// Describes the undescribed receive of `slot` now, with kEagerAhead: the run of undescribed
// small receives goes on, so the sender keeps sending small messages eagerly.
void describeLate(core::RecvComm& comm, RecvState& state, uint32_t slot);
// The sender's answer to the grant (kEagerLimit): it sends messages up to `maxBytes` eagerly.
void onEagerLimit(core::RecvComm& comm, RecvState& state, size_t maxBytes);
// The credit write ended: true when `op` was it.
bool onCreditWriteDone(core::RecvComm& comm, RecvState& state, core::Operation& op, int error);
// A read copying an eager message into GPU memory ended: true when `op` was one.
bool onEagerRead(core::RecvComm& comm, RecvState& state, core::Operation& op, int error);
// The sender may still write into the bounce area of a closed comm (kept until it answered).
bool bounceExposed(const core::DataComm& comm, RecvState& state);

}  // namespace nnf::protocol::rdma
