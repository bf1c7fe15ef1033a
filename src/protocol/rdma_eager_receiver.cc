// The receiver's side of the eager path (see rdma_eager.h for the design).
#include "protocol/rdma_eager_receiver.h"

#include <rdma/fi_errno.h>

#include <cstring>

#include "core/device.h"
#include "log/log.h"
#include "protocol/rdma_own_write.h"

namespace nnf::protocol::rdma {

EagerReceiver::EagerReceiver(core::RecvComm& comm, RdmaDevice& rdma, const ArenaSlot& staging,
                             const RemoteSlot& ring, RecvSlots& slots, ReceiverClose& close)
    : comm_(comm),
      rdma_(rdma),
      staging_(staging),
      ring_(ring),
      slots_(slots),
      close_(close),
      bounce_(rdma.eagerArena()) {
  creditWrite_.owner = &comm;
}

// The bounce area (64 entries, about 0.5 MiB at 8 KiB) goes only to comms that receive a second
// message and post a receive an eager message could fill: NCCL's step buffers are larger, and a
// comm that carried one message (10,000 of them in scale_test) takes none.
void EagerReceiver::maybeGrant(int count, const size_t* sizes) {
  size_t eagerMax = rdma_.eagerMaxBytes();
  if (eagerMax == 0) {
    mode_.onGrant(false);  // nothing to grant: never look again
    return;
  }
  for (int i = 0; i < count; ++i) {
    if (sizes[i] > eagerMax) continue;
    mode_.onGrant(grant());
    return;
  }
}

// Takes the bounce area and grants its entries: false when there is none to take.
bool EagerReceiver::grant() {
  if (rdma_.eagerArena() == nullptr || rdma_.eagerMaxBytes() == 0) return false;
  if (!bounce_.acquire()) return false;  // logged by the arena; the comm works without eager
  payload_ = rdma_.eagerMaxBytes();
  auto* area = reinterpret_cast<Grant*>(staging_->data + kGrantOffset);
  Grant granted{};
  granted.address = bounce_->remoteAddress;
  for (size_t r = 0; r < bounce_->railCount; ++r) granted.keys[r] = bounce_->keyOf(r);
  granted.entries = kEagerEntries;
  granted.payload = static_cast<uint32_t>(payload_);
  *area = granted;
  sendCredits();
  return true;
}

// Entries freed since the sender last heard, told by one write of the grant with immediate
// data: once the comm's first message has landed (none freed), then every kCreditBatch freed.
void EagerReceiver::sendCredits() {
  core::Operation& write = creditWrite_;
  if (write.inFlight || write.queued) {
    creditsOwed_ = true;
    return;
  }
  creditsOwed_ = false;
  uint64_t freed = inbox_.freed();
  write.request = nullptr;
  write.type = core::OpType::kWrite;
  size_t rail = ownWriteRail(comm_.device(), comm_);  // as descriptor writes (RecvSlots)
  write.rail = static_cast<uint8_t>(rail);
  write.peer = comm_.peer(rail);
  write.buffer = staging_->data + kGrantOffset;
  write.length = sizeof(Grant);
  write.desc = staging_->descOf(rail);
  write.headerLength = 0;
  write.remoteAddress = ring_.address + kGrantOffset;
  write.remoteKey = ring_.keys[rail];
  write.tag = encodeCredits(comm_.remoteId(), static_cast<uint32_t>(freed & 0xff));
  // A failure is logged by the device; the sender goes on with what it was granted.
  if (writeOwn(comm_.device(), write) == abi::kSuccess) creditsReported_ = freed;
}

void EagerReceiver::freeEntry(uint32_t entry) {
  uint64_t freed = inbox_.free(entry);
  if (!comm_.closed() && freed - creditsReported_ >= kCreditBatch) sendCredits();
}

void EagerReceiver::describeLate(uint32_t slot) {
  slots_.entries(slot)[0].flags |= kEagerAhead;
  if (slots_.describeLate(slot) != abi::kSuccess) slots_.failDescribing(slot, FI_EIO);
}

// Undescribed receives for messages larger than the sender's limit are described now rather than
// after kLateDescribeNs.
void EagerReceiver::onLimit(size_t maxBytes) {
  if (maxBytes >= senderMax_) return;
  senderMax_ = maxBytes;
  if (maxBytes < payload_) {
    NNF_INFO(abi::kLogSubsysNet,
             "comm %u: its sender sends messages up to %zu bytes eagerly; larger receives are "
             "described",
             comm_.id(), maxBytes);
  }
  slots_.forEachUndescribed([this, maxBytes](uint32_t slot) {
    core::Request* request = slots_.requestAt(slot);
    if (request != nullptr && request->ops[0].length > maxBytes) describeLate(slot);
  });
}

void EagerReceiver::deliver(core::Request& request, uint32_t index, uint32_t entry,
                            core::MemoryHandle* handle) {
  core::Operation& op = request.ops[index];
  size_t length = inbox_.at(entry).length;
  const uint8_t* payload = entryData(entry) + sizeof(EagerHeader);
  if (length > op.length) {
    comm_.onError(op, FI_ETRUNC, length - op.length,
                  "eager message larger than the receive buffer");
    freeEntry(entry);
    return;
  }
  core::Device& device = comm_.device();
  if (handle != nullptr && handle->type != memory::MemType::kHost && length > 0) {
    // GPU memory: the NIC copies it (a read from our own endpoint), no CUDA call here.
    size_t rail = ownWriteRail(device, comm_);
    op.type = core::OpType::kRead;
    op.rail = static_cast<uint8_t>(rail);
    op.peer = device.selfAddress(rail);
    op.desc = handle->descOn(rail);
    op.length = length;
    op.headerLength = 0;
    op.remoteAddress = bounce_->remoteAddress + (payload - bounce_->data);
    op.remoteKey = bounce_->keyOf(rail);
    op.eagerCopy = core::EagerCopy{entry, true};  // onRead frees it
    inbox_.copying(entry);
    if (device.post(op) != abi::kSuccess) {  // logged by the device
      op.eagerCopy.copying = false;
      comm_.onError(op, FI_EIO, 0, "copying an eager message into GPU memory");
      freeEntry(entry);
      return;
    }
    // Held while the NIC writes into it, and named there should the read go again elsewhere.
    comm_.holdRegistration(op, handle);
    return;
  }
  if (length > 0) memcpy(op.buffer, payload, length);
  freeEntry(entry);
  comm_.onComplete(op, length);
}

// The header of the message in `entry`: in the entry, or `implied` (then with the tag of the last
// header read). False, logged, when there is none.
bool EagerReceiver::readHeader(uint32_t entry, const EagerHeader* implied, EagerHeader* header) {
  if (implied == nullptr) {
    memcpy(header, entryData(entry), sizeof(*header));
    headerSeen_ = true;
    lastHeaderTag_ = header->tag;
    return true;
  }
  if (!headerSeen_) {
    NNF_WARN("comm %u: an eager message without a header before any header; dropped", comm_.id());
    return false;
  }
  *header = *implied;
  header->tag = lastHeaderTag_;
  return true;
}

void EagerReceiver::onLanded(uint32_t entry, const EagerHeader* implied, int generation) {
  if (!bounce_.held() || entry >= kEagerEntries) return;
  if (generation >= 0 && !inbox_.expects(entry, static_cast<uint32_t>(generation))) {
    // Its second landing: the sender wrote it again after its rail failed (we had not read the
    // first yet when it asked). The bytes are the same; the first one counted.
    NNF_INFO(abi::kLogSubsysNet,
             "comm %u: an eager message in bounce entry %u landed a second time (written again "
             "after its rail failed); left alone",
             comm_.id(), entry);
    return;
  }
  EagerHeader header;
  if (!readHeader(entry, implied, &header)) return;
  if (header.length > payload_ || !inbox_.land(entry, header.tag, header.seq, header.length)) {
    NNF_WARN(
        "comm %u: an eager message in bounce entry %u that is not free or too long (%u "
        "bytes); dropped",
        comm_.id(), entry, header.length);
    return;
  }
  if (comm_.closed()) {
    freeEntry(entry);
    return;
  }
  // Not received yet: it waits for its irecv.
  if (!behind(header.seq, comm_.sequences().peek(header.tag))) return;
  uint32_t slot, index;
  if (!slots_.findDescribed(header.tag, header.seq, &slot, &index)) {
    freeEntry(entry);  // its receive failed or was given up
    return;
  }
  core::Request& request = *slots_.requestAt(slot);
  SegmentOutcome outcome =
      slots_.progress(slot).onEager(index, header.length, !slots_.undescribed(slot));
  if (outcome == SegmentOutcome::kInvalid) {
    freeEntry(entry);
    return;
  }
  deliver(request, index, entry, slots_.handle(slot, index));
  if (request.remaining == 0 && slots_.requestAt(slot) == &request) slots_.finish(slot);
}

bool EagerReceiver::onCreditWriteDone(const core::Operation& op, int error) {
  if (&op != &creditWrite_) return false;
  // Its rail broke: the same count goes again on another (the sender takes it once: counts
  // only grow).
  if (error != 0 && !comm_.closed() &&
      writeOwnAgain(comm_.device(), comm_, creditWrite_, ring_.keys, &*staging_, error)) {
    return true;
  }
  if (error != 0) return true;  // logged by the device; the sender goes on with descriptors
  if (creditsOwed_ && !comm_.closed()) sendCredits();
  return true;
}

bool EagerReceiver::copying(const core::Operation& op) const {
  // Flushes are reads too, of requests of their own.
  return op.request != nullptr && !comm_.flushPool().owns(op.request) && op.eagerCopy.copying;
}

bool EagerReceiver::onRead(core::Operation& op, int error) {
  if (!copying(op)) return false;
  uint32_t entry = op.eagerCopy.entry;
  op.eagerCopy.copying = false;
  if (error == 0) op.transferred = op.length;
  freeEntry(entry);
  core::Request& request = *op.request;
  // The last buffer of a described group: its slot may go (onComplete counts it down next).
  if (request.remaining == 1 && slots_.requestAt(request.slot) == &request) {
    slots_.finish(request.slot);
  }
  return true;
}

bool EagerReceiver::readOn(core::Operation& op, size_t rail) {
  if (!copying(op) || op.heldRegistration == nullptr) return false;
  op.desc = op.heldRegistration->descOn(rail);
  op.remoteKey = bounce_->keyOf(rail);  // the same address on every rail
  return true;
}

bool EagerReceiver::bounceExposed() {
  if (!bounce_.held() || bounce_.leaked() || !comm_.closed() || comm_.peerFailed()) return false;
  if (close_.senderFinished()) return false;
  if (close_.lingering()) return true;
  // A live sender that never answered our close: the area never returns to the arena.
  bounce_.leak();
  NNF_INFO(abi::kLogSubsysNet,
           "comm %u: the sender did not answer the close within NCCL_FABRIC_CLOSE_TIMEOUT_MS; "
           "its eager bounce area is set aside rather than reused",
           comm_.id());
  return false;
}

}  // namespace nnf::protocol::rdma
