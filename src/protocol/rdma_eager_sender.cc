// The sender's side of the eager path (see rdma_eager.h for the design).
#include "protocol/rdma_eager_sender.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/device.h"
#include "platform/provider_rules.h"
#include "protocol/rdma_own_write.h"

namespace nnf::protocol::rdma {

EagerSender::EagerSender(core::SendComm& comm, RdmaDevice& rdma, const ArenaSlot& ring,
                         SenderClose& close)
    : comm_(comm), rdma_(rdma), ring_(ring), close_(close) {
  core::Device& device = comm.device();
  headerAhead_ = platform::rulesFor(platform::familyOf(device.provider())).writesWaitForTarget &&
                 device.deliversInOrder();
  limitWrite_.owner = &comm;
}

EagerHeader* EagerSender::headerStaging(uint32_t entry) const {
  return reinterpret_cast<EagerHeader*>(ring_->data + kEagerHeadersOffset +
                                        entry * sizeof(EagerHeader));
}

// Header and message gathered into one buffer and written inline: no completion to read.
[[gnu::always_inline]] inline bool EagerSender::sendGathered(core::Request& request,
                                                             core::Operation& op,
                                                             const EagerHeader* header, int32_t tag,
                                                             size_t size) {
  core::Operation gathered = op;
  uint8_t* scratch = rdma_.injectScratch();
  memcpy(scratch, header, sizeof(EagerHeader));
  if (size > 0) memcpy(scratch + sizeof(EagerHeader), op.buffer, size);
  gathered.headerLength = 0;
  gathered.buffer = scratch;
  gathered.length = sizeof(EagerHeader) + size;
  abi::Result injected = comm_.device().inject(gathered);
  if (injected == abi::kSuccess) {
    headerSaid_ = true;
    lastHeaderTag_ = tag;
  }
  return endedByInject(injected, request, size);
}

// The receiver knows the tag from the last header (in order, every write lands after the ones
// before it), and the immediate carries the rest: one inline write.
[[gnu::always_inline]] inline bool EagerSender::sendHeaderless(core::Request& request,
                                                               core::Operation& op, int32_t tag,
                                                               uint16_t seq, uint32_t entry,
                                                               size_t size) {
  core::Operation message = op;
  message.headerLength = 0;
  message.remoteAddress += sizeof(EagerHeader);
  message.tag = encodeEagerImplied(comm_.remoteId(), entry, seq, static_cast<uint16_t>(size));
  return endedByInject(comm_.device().inject(message), request, size);
}

// A 4 KiB message on shm: a posted write of it would complete only once the receiver runs. The
// header goes inline first, with an immediate of its own, then the message inline; the provider
// delivers them in order, so the header is there when the message is read.
[[gnu::always_inline]] inline bool EagerSender::sendHeaderAhead(core::Request& request,
                                                                core::Operation& op,
                                                                const EagerHeader* header,
                                                                int32_t tag, uint32_t entry,
                                                                size_t size) {
  core::Device& device = comm_.device();
  core::Operation head = op;
  head.headerLength = 0;
  head.buffer = const_cast<EagerHeader*>(header);
  head.length = sizeof(EagerHeader);
  head.tag = encodeEagerHeader(comm_.remoteId(), entry);
  abi::Result injected = device.inject(head);
  if (injected == abi::kSuccess) {
    close_.countWrite(op.rail);
    headerSaid_ = true;
    lastHeaderTag_ = tag;
    core::Operation message = op;
    message.headerLength = 0;
    message.remoteAddress += sizeof(EagerHeader);
    // Refused after its header (kInProgress): the posted write after this carries the same
    // header again.
    injected = device.inject(message);
  }
  return endedByInject(injected, request, size);
}

// What an inline write of the send in `request` came to: true when the send ended with it (done,
// its `size` bytes counted, or failed); false when the provider had no room (kInProgress).
[[gnu::always_inline]] inline bool EagerSender::endedByInject(abi::Result injected,
                                                              core::Request& request, size_t size) {
  if (injected == abi::kInProgress) return false;
  if (injected == abi::kSuccess) {
    close_.countWrite(request.ops[0].rail);  // the write took the request's operation's rail
    request.ops[0].transferred = size;
    request.state = core::Request::State::kDone;
  } else {
    request.state = core::Request::State::kFailed;
    request.error = injected;
  }
  return true;
}

bool EagerSender::send(core::Request& request, int32_t tag, uint16_t seq,
                       core::MemoryHandle* handle) {
  core::Operation& op = request.ops[0];
  size_t size = op.pendingSend.bytes;
  core::Device& device = comm_.device();
  // Without a registration the message can go only where the provider needs no descriptor.
  if (handle == nullptr && size > 0 && device.rail().needsLocalRegistration()) return false;
  bool hostBuffer = handle == nullptr || handle->type == memory::MemType::kHost;
  if (!hostBuffer && !rdma_.eagerFromGpuMemory()) {
    // The provider would copy the GPU message with the CPU (ProviderRules::writesMixedMemoryIovs):
    // it waits for its descriptor. A receiver that leaves small receives undescribed for us
    // hears that we send nothing eagerly (a comm's buffers are all GPU or all host in NCCL).
    if (mode_.onGpuRefused()) {
      maxBytes_ = 0;
      announceLimit();
    }
    return false;
  }
  if (!voids_) return false;  // none could be allocated at the grant: no eager sends
  uint32_t entry, generation;
  if (!credits_.take(&entry, &generation)) return false;
  EagerHeader* header = headerStaging(entry);
  *header = EagerHeader{tag, seq, 0, static_cast<uint32_t>(size), 0};
  // The bounce area and our headers' staging are registered on every rail: the messages take
  // the rails in turn (the entry, not the order, tells the receiver which message it is).
  size_t rail = nextRail();
  op.rail = static_cast<uint8_t>(rail);
  op.peer = comm_.peer(rail);
  op.desc = handle != nullptr ? handle->descOn(rail) : nullptr;
  op.length = size;
  // One segment, nothing to post after it; the message's (tag, sequence number) name it should
  // its rail fail (rdma_send_recovery.h).
  op.segment = core::WriteSegment{0, tag, seq, 0, 0};
  op.transferred = 0;
  op.header = header;
  op.headerDesc = ring_->descOf(rail);
  op.headerLength = sizeof(EagerHeader);
  op.remoteAddress = grant_.address + bounceEntryOffset(entry, grant_.payload);
  op.remoteKey = grant_.keys[rail];
  op.tag = encodeEager(comm_.remoteId(), entry, generation);
  request.count = 1;
  request.remaining = 0;
  // Inline only on a comm of one rail: efa reports a failed inject without its context, so a
  // rail's failure would lose the message unseen (startWrite says the same).
  if (hostBuffer && comm_.rails() == 1 && sizeof(EagerHeader) + size <= device.injectLimit() &&
      sendGathered(request, op, header, tag, size)) {
    return true;
  }
  if (hostBuffer && headerAhead_ && size <= device.injectLimit()) {
    if (headerSaid_ && lastHeaderTag_ == tag && rdma_.immediateCarriesLength() &&
        sendHeaderless(request, op, tag, seq, entry, size)) {
      return true;
    }
    if (sendHeaderAhead(request, op, header, tag, entry, size)) return true;
  }
  // A posted write may still fail: the receiver may never read its header.
  headerSaid_ = false;
  abi::Result result = device.post(op);
  if (result != abi::kSuccess) {
    request.state = core::Request::State::kFailed;
    request.error = result;
    return true;
  }
  request.remaining = 1;
  comm_.holdRegistration(request, handle);
  return true;
}

void EagerSender::onCredits(uint32_t freedMod256) {
  bool first = !credits_.granted();
  if (first) {
    // Every credit write carries the grant: whichever lands first describes the area.
    memcpy(&grant_, ring_->data + kGrantOffset, sizeof(grant_));
    // Connected by now: the rails both ends drive are known.
    rails_ = headerAhead_ ? 1 : comm_.rails();
    maxBytes_ = std::min<size_t>(rdma_.eagerMaxBytes(), grant_.payload);
    if (grant_.entries != kEagerEntries) maxBytes_ = 0;  // not ours to guess
    if (maxBytes_ > 0 && !voids_) {
      // An eager message's descriptor may cross it: the void writes that answer it are taken
      // with the grant, once a comm (receivers grant after a comm's first message, so most of
      // 10,000 idle comms hold none), not by the first eager send on the data path.
      voids_.reset(new (std::nothrow) VoidWriter(comm_, close_));
      if (!voids_) maxBytes_ = 0;  // the answer below says so
    }
    mode_.onGrant(maxBytes_ > 0);
  }
  credits_.onCredits(freedMod256);
  if (first) announceLimit();
}

void EagerSender::announceLimit() {
  core::Operation& write = limitWrite_;
  // One answer in flight at a time: a second (the limit dropped to 0) is rare enough to skip.
  if (write.inFlight || write.queued || close_.receiverDone() || !credits_.granted()) return;
  write.request = nullptr;
  write.type = core::OpType::kWrite;
  size_t rail = ownWriteRail(comm_.device(), comm_);
  write.rail = static_cast<uint8_t>(rail);
  write.peer = comm_.peer(rail);
  write.buffer = nullptr;
  write.length = 0;
  write.desc = nullptr;
  write.headerLength = 0;
  write.remoteAddress = grant_.address;  // nothing is written: any valid target does
  write.remoteKey = grant_.keys[rail];
  write.tag = encodeEagerLimit(comm_.remoteId(), maxBytes_);
  // A failure is the device's to log: the receiver then describes late what never comes.
  if (writeOwn(comm_.device(), write) != abi::kSuccess) return;
  if (!write.inFlight && !write.queued) close_.countWrite(write.rail);  // inline: done already
}

bool EagerSender::onOwnCompletion(core::Operation& op, int error) {
  if (&op == &limitWrite_) {
    // Its rail broke: the same limit goes again on another (the receiver takes it twice alike).
    if (error != 0 && !close_.receiverDone() &&
        writeOwnAgain(comm_.device(), comm_, limitWrite_, grant_.keys, nullptr, error)) {
      return true;
    }
    if (error == 0) close_.countWrite(op.rail);  // the receiver counts what lands
    return true;
  }
  return voids_ && voids_->onDone(op, error);
}

int EagerSender::writesPending() const {
  int limit = limitWrite_.inFlight || limitWrite_.queued ? 1 : 0;
  return limit + (voids_ ? voids_->pending() : 0);
}

}  // namespace nnf::protocol::rdma
