#include "protocol/rdma_sender.h"

#include "protocol/rdma.h"

#include <new>

#include "core/device.h"
#include "core/tags.h"
#include "log/log.h"

namespace nnf::protocol::rdma {
namespace {

static_assert(sizeof(WaitLink) <= sizeof(fi_context2) && alignof(WaitLink) <= alignof(fi_context2));

// The tag field of a send that waits: who it waits for (checked when its descriptor comes).
uint64_t waitKey(int32_t tag, uint16_t seq) {
  return core::tags::data(0, seq, tag);
}

}  // namespace

Sender::Sender(core::SendComm& comm, RdmaDevice& rdma)
    : comm_(comm),
      ring_(rdma.ringArena()),
      close_(comm, ring_),
      striper_(comm, rdma, close_),
      eager_(comm, rdma, ring_, close_),
      recovery_(comm, rdma, ring_, eager_.hold()) {}

bool Sender::start(ConnectInfo* info) {
  if (!ring_.acquire()) return false;
  info->ringAddress = ring_->remoteAddress;
  info->ringKey = ring_->key;
  for (size_t r = 1; r < ring_->railCount; ++r) info->ringRailKeys[r - 1] = ring_->keyOf(r);
  return true;
}

[[gnu::always_inline]] inline void Sender::write(core::Request& request, const Arrived& arrived,
                                                 const BufferDescriptor& buffer,
                                                 core::MemoryHandle* handle) {
  striper_.startWrite(request, arrived, buffer, handle);
  comm_.holdRegistration(request, handle);
}

// The send waits for its descriptor, linked through its operation's context (nothing is posted
// while it waits: the context is ours). Until its write starts NCCL may deregister the buffer
// (deregMr, then close): the handle counts the sends that wait on it.
[[gnu::always_inline]] inline void Sender::wait(core::Request& request, int32_t tag, uint16_t seq,
                                                core::MemoryHandle* handle) {
  core::Operation& op = request.ops[0];
  op.tag = waitKey(tag, seq);
  op.pendingSend.handle = handle;
  if (handle != nullptr) ++handle->waitingSends;
  matcher_.addWaiting(new (&op.context) WaitLink, tag, seq);
}

// A send that waited: its handle no longer counts it. False, and the request failed, when NCCL
// deregistered the buffer meanwhile.
[[gnu::always_inline]] inline bool Sender::takeWaitingHandle(core::Request& request,
                                                             core::MemoryHandle** handle) {
  core::Operation& op = request.ops[0];
  *handle = op.pendingSend.handle;
  op.pendingSend.handle = nullptr;
  if (*handle == nullptr) return true;
  --(*handle)->waitingSends;
  if (!(*handle)->released) return true;
  if (!warnedReleased_) {  // an abort releases many: one WARN a comm
    warnedReleased_ = true;
    NNF_WARN(
        "send of %llu bytes on comm %u: its buffer was deregistered before the receiver "
        "asked for it; the send fails",
        static_cast<unsigned long long>(op.pendingSend.bytes), comm_.id());
  }
  request.state = core::Request::State::kFailed;
  request.error = abi::kInternalError;
  request.remaining = 0;
  return false;
}

[[gnu::always_inline]] inline abi::Result Sender::postSend(core::Request& request, void* data,
                                                           size_t size, int tag,
                                                           core::MemoryHandle* handle) {
  uint32_t next = 0;  // nextSequence sets it whenever it succeeds; GCC cannot tell
  if (!comm_.nextSequence(tag, &next)) return abi::kInternalError;
  auto seq = static_cast<uint16_t>(next);
  core::Operation& op = request.ops[0];
  op.owner = &comm_;
  op.type = core::OpType::kWrite;
  op.buffer = data;
  op.pendingSend = core::PendingSend{size, nullptr};  // the whole message until it is matched
  op.desc = handle != nullptr ? handle->desc : nullptr;
  op.peer = comm_.peer();
  // Nothing is with the provider until the descriptor has come: a failure or abort before then
  // returns the request to the pool at once.
  request.remaining = 0;
  Arrived arrived;
  if (matcher_.takeDescriptor(tag, seq, &arrived)) {
    write(request, arrived, entries(arrived.slot)[arrived.index], handle);
    return request.state == core::Request::State::kFailed && request.error != abi::kInternalError
               ? request.error
               : abi::kSuccess;
  }
  if (eager_.mayGo(size) && eager_.send(request, tag, seq, handle)) {
    return request.state == core::Request::State::kFailed ? request.error : abi::kSuccess;
  }
  wait(request, tag, seq, handle);
  return abi::kSuccess;
}

void Sender::onDescriptors(uint32_t slot, uint32_t count) {
  const BufferDescriptor* group = entries(slot);
  // A group whose write failed with its rail lands again from another: taken once.
  if (slot >= kSlots || static_cast<int32_t>(group[0].generation - generations_[slot]) <= 0) {
    return;
  }
  generations_[slot] = group[0].generation;
  matcher_.expectGroup(count);
  bool aheadStarts = eager_.onDescriptorGroup((group[0].flags & kEagerAhead) != 0);
  for (uint32_t i = 0; i < count; ++i) {
    const BufferDescriptor& buffer = group[i];
    if ((buffer.flags & kSettled) != 0) continue;  // its message went eagerly
    Arrived arrived{buffer.tag, buffer.seq, static_cast<uint8_t>(slot), static_cast<uint8_t>(i)};
    WaitLink* link = matcher_.takeWaiting(buffer.tag, buffer.seq);
    core::Request* request =
        link != nullptr ? core::Operation::fromContext(link)->request : nullptr;
    // A waiting send that failed or was given up meanwhile is no longer waiting.
    if (request != nullptr && request->state == core::Request::State::kActive &&
        request->ops[0].tag == waitKey(buffer.tag, buffer.seq)) {
      core::MemoryHandle* handle = nullptr;
      if (takeWaitingHandle(*request, &handle)) write(*request, arrived, buffer, handle);
    } else if (link == nullptr && behind(buffer.seq, comm_.sequences().peek(buffer.tag))) {
      // Its send went eagerly, or failed: nothing will be written, the slot may be reused.
      eager_.answerDescriptor(slot, i, buffer);
    } else {
      matcher_.addDescriptor(arrived);
    }
  }
  // Small sends that waited will find no descriptor now: the receiver stopped describing.
  if (aheadStarts) sendWaitingEagerly();
}

void Sender::onCredits(uint32_t freedMod256) {
  eager_.onCredits(freedMod256);
  sendWaitingEagerly();
}

// Entries came free, or the receiver said its small receives go undescribed, or went quiet: small
// sends waiting for their descriptors go eagerly instead, oldest first.
void Sender::sendWaitingEagerly() {
  if (matcher_.sendsWaiting() == 0 || !eager_.open()) return;
  while (!eager_.entriesFull()) {
    size_t maxBytes = eager_.maxBytes();
    WaitLink* link = matcher_.takeFirstWaiting([maxBytes](WaitLink& waiting) {
      const core::Operation* op = core::Operation::fromContext(&waiting);
      return op->request->state == core::Request::State::kActive &&
             op->pendingSend.bytes <= maxBytes;
    });
    if (link == nullptr) return;
    int32_t tag = link->tag;
    uint16_t seq = link->seq;
    core::Request& request = *core::Operation::fromContext(link)->request;
    core::MemoryHandle* handle = nullptr;
    if (!takeWaitingHandle(request, &handle)) continue;  // failed: deregistered meanwhile
    if (!eager_.send(request, tag, seq, handle)) {
      // Refused after all (no registration the provider can use): it waits again.
      wait(request, tag, seq, handle);
      return;
    }
  }
}

bool Sender::onOwnCompletion(core::Operation& op, int error) {
  if (close_.isAnswer(op)) {
    if (error != 0) close_.answerAgain(error);  // its rail broke: it goes again on another
    return true;
  }
  if (recovery_.onOwnCompletion(op, error)) {
    eager_.postVoids();  // a failed question gives up the voids in doubt
    onWriteDone();
    return true;
  }
  // A void that failed on a broken rail may have landed: the receiver is asked before it goes
  // again (SendRecovery).
  if (error != 0 && eager_.isVoid(op) && !close_.receiverDone() &&
      recovery_.onVoidFailed(op, error)) {
    return true;
  }
  if (!eager_.onOwnCompletion(op, error)) return false;
  onWriteDone();  // a close answer may wait for this write
  return true;
}

bool Sender::continueWrite(core::Operation& op) {
  // Every write of a request that completes carried immediate data: the receiver counts it.
  if (op.rail < kMaxRails) close_.countWrite(op.rail);
  if (op.rail != 0 && op.rail < kMaxRails) eager_.onRailReached(op.rail);
  // An eager message written again after its rail failed landed: eager sends may go again.
  if (op.segment.resent != 0 && recovery_.onWrittenAgain(op)) sendWaitingEagerly();
  return striper_.continueWrite(op);
}

int Sender::ownInFlight() {
  // Queued counts too: a comm freed with an operation in the device's retry queue would leave
  // the queue pointing into freed memory.
  if (close_.answerPending()) return 1;
  return eager_.writesPending() + (close_.ringExposed() ? 1 : 0) +
         (recovery_.questionPending() ? 1 : 0);
}

void Sender::forEachOwn(const std::function<void(core::Operation&)>& visit) {
  visit(close_.answer());
  visit(recovery_.question());
  eager_.forEachOwnWrite(visit);
}

void Sender::onClose() {
  close_.onClose(eager_.writesPending());
}

void Sender::onPeerClosed() {
  close_.onPeerClosed(eager_.writesPending());
}

void Sender::onWriteDone() {
  // Every write's end comes here: the answer's conditions are read only when one is owed.
  recovery_.onWriteEnded();
  if (close_.answerOwed()) close_.answerIfIdle(eager_.writesPending());
}

void Sender::onWaiting(uint64_t waitedNs) {
  // Small sends waiting for descriptors of a receiver gone quiet (kEagerQuietNs) go eagerly: no
  // descriptor and no credit write may come to say so.
  if (waitedNs >= kEagerQuietNs) sendWaitingEagerly();
}

void Sender::forget(core::Request& request) {
  recovery_.forget(request);
  // A send given up while it waited leaves the list before its request can be used again.
  core::Operation& op = request.ops[0];
  if (!op.inFlight && !op.queued) {
    matcher_.removeWaiting(reinterpret_cast<WaitLink*>(&op.context));
  }
}

}  // namespace nnf::protocol::rdma

namespace nnf::protocol {

// Here rather than in rdma.cc: Sender::postSend inlines into it (a call less on every isend).
abi::Result Rdma::postSend(core::SendComm& comm, core::Request& request, void* data, size_t size,
                           int tag, core::MemoryHandle* handle) {
  return static_cast<rdma::Sender*>(comm.protocolState())
      ->postSend(request, data, size, tag, handle);
}

}  // namespace nnf::protocol
