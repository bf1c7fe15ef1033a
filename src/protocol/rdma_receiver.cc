#include "protocol/rdma_receiver.h"

#include "protocol/rdma.h"

#include <rdma/fi_errno.h>

#include "core/device.h"
#include "core/tags.h"
#include "log/log.h"

namespace nnf::protocol::rdma {
namespace {

void unpost(core::Device& device, core::Operation& op) {
  if (op.queued) device.unqueue(op);
  if (op.inFlight) device.cancel(op);
}

}  // namespace

Receiver::Receiver(core::RecvComm& comm, RdmaDevice& rdma)
    : comm_(comm),
      rdma_(rdma),
      staging_(rdma.ringArena()),
      slots_(comm, staging_, ring_),
      close_(comm, staging_),
      eager_(comm, rdma, staging_, ring_, slots_, close_),
      recovery_(comm, staging_, slots_, eager_) {}

bool Receiver::start(const ConnectInfo& info) {
  if (!staging_.acquire()) return false;
  ring_.address = info.ringAddress;
  ring_.keys[0] = info.ringKey;
  for (size_t r = 1; r < kMaxRails; ++r) ring_.keys[r] = info.ringRailKeys[r - 1];
  return true;
}

// The lowest free slot, or kSlots. (The data path's helpers are inlined: a call costs more than
// they do.)
[[gnu::always_inline]] inline uint32_t Receiver::takeFreeSlot() {
  uint32_t slot = slots_.freeSlot();
  if (slot != kSlots) return slot;
  // A slot comes back once its descriptor write's completion is read: NCCL may be retrying irecv
  // alone (and providers may hold completions back), so read them here too.
  if (comm_.device().progress() != abi::kSuccess) return kSlots;  // logged there
  return slots_.freeSlot();
}

// Stages the descriptors of the receive's buffers in `slot` and prepares its operations (never
// posted: the sender's writes complete them). Nothing is described for a buffer whose eager
// message is here already.
[[gnu::always_inline]] inline abi::Result Receiver::stage(core::Request& request, uint32_t slot,
                                                          int count, void* const* data,
                                                          const size_t* sizes, const int* tags,
                                                          core::MemoryHandle* const* handles,
                                                          Staged* staged) {
  BufferDescriptor* entries = slots_.entries(slot);
  staged->settledMask = 0;
  staged->settled = 0;
  for (int i = 0; i < count; ++i) {
    core::MemoryHandle* handle = handles != nullptr ? handles[i] : nullptr;
    abi::Result result =
        stageBuffer(request, i, entries[i], data[i], sizes[i], tags[i], handle, staged);
    if (result != abi::kSuccess) return result;
  }
  return abi::kSuccess;
}

[[gnu::always_inline]] inline abi::Result Receiver::stageBuffer(core::Request& request, int i,
                                                                BufferDescriptor& entry, void* data,
                                                                size_t size, int tag,
                                                                core::MemoryHandle* handle,
                                                                Staged* staged) {
  uint32_t next = 0;  // nextSequence sets it whenever it succeeds; GCC cannot tell
  if (!comm_.nextSequence(tag, &next)) return abi::kInternalError;
  auto seq = static_cast<uint16_t>(next);
  uint32_t eager = eager_.find(tag, seq);
  staged->eager[i] = eager;
  entry.flags = 0;
  if (eager != kEagerEntries) {
    entry.flags = kSettled;
    staged->settledMask |= 1u << i;
    ++staged->settled;
  }
  staged->described[i] = nullptr;
  if (handle != nullptr && handle->mr != nullptr) {
    entry.address = handle->remoteAddress(data);
    for (size_t r = 0; r < kMaxRails; ++r) entry.keys[r] = handle->key(r);
    staged->described[i] = handle;
  } else if (size == 0) {
    // Nothing will be written: any valid target does (our own staging entry, on whichever rail
    // the empty message goes).
    entry.address = staging_->remoteAddress;
    for (size_t r = 0; r < kMaxRails; ++r)
      entry.keys[r] = r < staging_->railCount ? staging_->keyOf(r) : 0;
  } else {
    NNF_WARN(
        "irecv: buffer %d (%zu bytes) on comm %u has no memory handle; the rdma protocol "
        "writes only into registered buffers",
        i, size, comm_.id());
    return abi::kInternalError;
  }
  entry.size = size;
  entry.tag = tag;
  entry.seq = seq;
  entry.generation = 0;  // the first buffer's is set when the group is described
  entry.reserved2 = 0;
  staged->sizes[i] = size;
  core::Operation& op = request.ops[i];
  op.owner = &comm_;
  op.type = core::OpType::kRecv;  // never posted: the sender's writes complete it
  op.buffer = data;
  op.length = size;
  op.transferred = 0;
  op.eagerCopy = core::EagerCopy{};
  op.tag = core::tags::data(comm_.id(), next, tag);
  return abi::kSuccess;
}

// Copies the eager messages found while staging into their buffers.
[[gnu::always_inline]] inline void Receiver::deliverSettled(core::Request& request, int count,
                                                            const Staged& staged,
                                                            core::MemoryHandle* const* handles) {
  for (int i = 0; i < count; ++i) {
    if (staged.eager[i] == kEagerEntries) continue;
    eager_.deliver(request, static_cast<uint32_t>(i), staged.eager[i],
                   handles != nullptr ? handles[i] : nullptr);
  }
}

[[gnu::always_inline]] inline abi::Result Receiver::postRecv(core::Request& request, int count,
                                                             void* const* data, const size_t* sizes,
                                                             const int* tags,
                                                             core::MemoryHandle* const* handles) {
  uint32_t slot = takeFreeSlot();
  if (slot == kSlots) return abi::kInProgress;
  eager_.onReceivePosted(count, sizes);
  Staged staged;
  abi::Result result = stage(request, slot, count, data, sizes, tags, handles, &staged);
  if (result != abi::kSuccess) return result;
  request.remaining = static_cast<uint8_t>(count);
  if (staged.settled == count) {
    // Every message is here: no descriptor, no slot.
    request.slot = static_cast<uint16_t>(kSlots);
    deliverSettled(request, count, staged, handles);
    return abi::kSuccess;
  }
  bool small = eager_.fillable(count, sizes[0], handles != nullptr ? handles[0] : nullptr);
  // Its message comes eagerly: staged here in case it must be described late (onWaiting).
  bool undescribed = small && eager_.aheadSaid() && staged.settled == 0;
  request.slot = static_cast<uint16_t>(slot);
  slots_.take(slot, request, static_cast<uint32_t>(count), staged.sizes, staged.described,
              staged.settledMask, /*describe=*/!undescribed);
  if (undescribed) return abi::kSuccess;
  // The first small receive tells the sender that the next ones go undescribed; any other ends
  // that run.
  if (small) slots_.entries(slot)[0].flags |= kEagerAhead;
  result = slots_.describe(slot);
  if (result != abi::kSuccess) {
    slots_.release(slot);
    request.remaining = 0;
    return result;
  }
  eager_.onDescribed(small);
  if (staged.settled > 0) deliverSettled(request, count, staged, handles);
  return abi::kSuccess;
}

bool Receiver::onWrite(size_t rail, const Immediate& imm, size_t length) {
  close_.onLanded(rail);
  switch (imm.kind) {
    case ImmKind::kEagerHeader:
      return true;  // its message follows (counted above)
    case ImmKind::kEagerLimit:
      eager_.onLimit(imm.count);
      return true;
    case ImmKind::kEagerImplied: {
      EagerHeader header{0, static_cast<uint16_t>(imm.count), 0, imm.length, 0};
      eager_.onLanded(imm.slot, &header);
      return true;
    }
    case ImmKind::kEager:
      eager_.onLanded(imm.slot, nullptr, static_cast<int>(imm.count));
      return true;
    case ImmKind::kVoid:
      slots_.onVoid(imm.slot, imm.index, rail);
      return true;
    default:
      return onSegment(rail, imm, length);
  }
}

// A segment of a message landed in a described buffer (or the notice that it did not fit).
bool Receiver::onSegment(size_t rail, const Immediate& imm, size_t length) {
  core::Request* request = slots_.requestAt(imm.slot);
  if (request == nullptr) return false;
  uint64_t segmentBytes = rdma_.immediateCarriesLength() ? imm.length : length;
  uint64_t total = 0;
  switch (
      slots_.progress(imm.slot).onSegment(imm.index, imm.segments, segmentBytes, &total, rail)) {
    case SegmentOutcome::kPending:
      return true;
    case SegmentOutcome::kComplete:
      comm_.onComplete(request->ops[imm.index], total);
      // The first message went by descriptor (its sender learned the buffer's size before
      // writing); later small ones may go eagerly (postRecv grants the entries).
      eager_.onMessageLanded();
      break;
    case SegmentOutcome::kTruncated: {
      core::Operation& op = request->ops[imm.index];
      size_t overflow =
          rdma_.immediateCarriesLength() && imm.length > op.length ? imm.length - op.length : 0;
      comm_.onError(op, FI_ETRUNC, overflow, "message larger than the receive buffer");
      break;
    }
    case SegmentOutcome::kInvalid:
      return false;
  }
  if (request->remaining == 0) slots_.finish(imm.slot);
  return true;
}

bool Receiver::onOwnCompletion(core::Operation& op, int error) {
  if (close_.onNoticeDone(op, error)) return true;
  if (recovery_.onOwnCompletion(op, error)) return true;
  bool ours = eager_.onCreditWriteDone(op, error);
  if (!ours) {
    uint32_t slot = slots_.slotOfWrite(op);
    if (slot == kSlots) return false;
    if (error != 0 && !slots_.writeAgain(slot, op, error)) slots_.failDescribing(slot, error);
    ours = true;
  }
  // The close notice may have waited for this write (see onClose).
  close_.onOwnWriteEnded([this] { return writesIntoRingInFlight(); });
  return ours;
}

bool Receiver::onRequestRead(core::Operation& op, int error) {
  return eager_.onRead(op, error);
}

int Receiver::ownInFlight() {
  int count = eager_.bounceExposed() ? 1 : 0;
  visitOwn([&count](const core::Operation& op) { count += op.inFlight || op.queued ? 1 : 0; });
  return count;
}

void Receiver::forEachOwn(const std::function<void(core::Operation&)>& visit) {
  visitOwn(visit);
}

void Receiver::cancelOwn() {
  core::Device& device = comm_.device();
  unpost(device, eager_.creditWrite());
  slots_.forEachWrite([&device](core::Operation& op) { unpost(device, op); });
}

void Receiver::onClose() {
  close_.onClose(slots_.anyServing(), writesIntoRingInFlight());
}

void Receiver::onWaiting(core::Request& request, uint64_t waitedNs) {
  uint32_t slot = request.slot;
  if (slot >= kSlots || !slots_.undescribed(slot) || slots_.requestAt(slot) != &request ||
      waitedNs < kLateDescribeNs) {
    return;
  }
  // Nothing came eagerly: the message may be larger than the buffer, or its sender may have had
  // no entry free, or was away. Described now, it finds its send (and a truncation is refused
  // there); the run goes on.
  eager_.describeLate(slot);
}

void Receiver::forget(core::Request& request) {
  if (slots_.requestAt(request.slot) == &request) slots_.release(request.slot);
}

}  // namespace nnf::protocol::rdma

namespace nnf::protocol {

// Here rather than in rdma.cc: Receiver::postRecv inlines into it (a call less on every irecv).
abi::Result Rdma::postRecv(core::RecvComm& comm, core::Request& request, int count,
                           void* const* data, const size_t* sizes, const int* tags,
                           core::MemoryHandle* const* handles) {
  return static_cast<rdma::Receiver*>(comm.protocolState())
      ->postRecv(request, count, data, sizes, tags, handles);
}

}  // namespace nnf::protocol
