// The target side of a group: peers' writes that landed (counted per link, rma/links.h), the
// signals they lead to, and the credits that let each source reuse its ring slots.
//
// A signal is applied only once the data of its put has landed here, whatever order SRD
// delivered them in: every data segment is a write with immediate data that the completion
// queue reports, and the entry says how many to wait for. Into host memory a signal is a CPU
// atomic addition after the inline bytes' copy; into GPU memory, a write by our own NIC
// (rma/signal_words.h), never a CPU store.
#include <rdma/fi_errno.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "core/device.h"
#include "log/log.h"
#include "rma/group.h"

namespace nnf::rma {

void Group::targetError(const char* fmt, ...) {
  char text[256];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  noteError();
  if (!targetWarned_) {
    targetWarned_ = true;
    NNF_WARN("RMA group %u: %s", id(), text);
  } else {
    NNF_INFO(abi::kLogSubsysNet, "RMA group %u: %s", id(), text);
  }
}

void Group::onRemote(uint32_t peer, ImmKind kind, uint32_t field) {
  Peer& p = peers_[peer];
  if (kind != ImmKind::kCredit) ++p.landed;
  switch (kind) {
    case ImmKind::kPlain:
      p.in.onPlain();
      return;
    case ImmKind::kSignaled:
      if (!p.in.onSegment(field)) {
        targetError("rank %u wrote a segment for ring slot %u, which has none in flight", peer,
                    field % kSlots);
      }
      return;
    case ImmKind::kEntry: {
      const uint8_t* stored = inboundEntry(peer, field % kSlots);
      SignalEntry entry;
      memcpy(&entry, stored, kEntryHeaderBytes);
      if (entry.inlineBytes > kInlineMax ||
          (entry.op != kSignalOpInc && entry.op != kSignalOpAdd) ||
          !p.in.onEntry(field, entry, stored + kEntryHeaderBytes)) {
        targetError("rank %u wrote a signal entry (sequence %u) that is out of order or "
                    "malformed",
                    peer, entry.seq);
      }
      return;
    }
    case ImmKind::kCredit:
      if (p.out.onCredit(field)) startWaiting(peer);
      return;
  }
}

bool Group::apply(uint32_t peer, const SignalEntry& entry, const uint8_t* payload) {
  bool strong = (entry.flags & kEntryStrong) != 0;
  // A strong signal must not become visible before a signal applied earlier: wait until the GPU
  // words' writes are all done.
  if (strong && !words_->quiet()) {
    if (!peers_[peer].blockedListed) {
      peers_[peer].blockedListed = true;
      blockedPeers_.push_back(peer);
    }
    return false;
  }
  if (entry.inlineBytes > 0) {
    Window* dst = entry.dstWindow < windows_.size() ? windows_[entry.dstWindow].get() : nullptr;
    if (dst == nullptr || !dst->alive || !dst->host || !dst->holds(entry.dstOffset,
                                                                   entry.inlineBytes)) {
      targetError("rank %u put %u bytes into window %u at offset %llu, which is not a registered "
                  "host window here (or too small)",
                  peer, entry.inlineBytes, entry.dstWindow,
                  static_cast<unsigned long long>(entry.dstOffset));
    } else {
      memcpy(dst->base + entry.dstOffset, payload, entry.inlineBytes);
    }
  }
  Window* window =
      entry.signalWindow < windows_.size() ? windows_[entry.signalWindow].get() : nullptr;
  if (window == nullptr || !window->alive || !window->holds(entry.signalOffset, 8)) {
    targetError("rank %u signalled window %u at offset %llu, which is not registered here (or "
                "too small)",
                peer, entry.signalWindow, static_cast<unsigned long long>(entry.signalOffset));
    return true;  // consumed: the link goes on
  }
  uint64_t delta = entry.op == kSignalOpInc ? 1 : entry.value;
  if (window->host) {
    uint8_t* word = window->base + entry.signalOffset;
    if (reinterpret_cast<uintptr_t>(word) % alignof(uint64_t) != 0) {
      targetError("rank %u signalled %p, which is not 8-byte aligned", peer,
                  static_cast<void*>(word));
      return true;
    }
    // Release: whoever sees the new value sees the inline bytes copied before it.
    __atomic_fetch_add(reinterpret_cast<uint64_t*>(word), delta, __ATOMIC_RELEASE);
    return true;
  }
  if (words_->add(window->index, entry.signalOffset, delta, strong, window->neverReset))
    return true;
  if (!peers_[peer].blockedListed) {
    peers_[peer].blockedListed = true;
    blockedPeers_.push_back(peer);
  }
  return false;
}

void Group::retryBlocked() {
  // Both vectors hold nranks_ from the start: swapping them allocates nothing.
  retrying_.swap(blockedPeers_);
  for (uint32_t peer : retrying_) peers_[peer].blockedListed = false;
  for (uint32_t peer : retrying_) peers_[peer].in.retry();  // refused ones list themselves again
  retrying_.clear();
}

void Group::credit(uint32_t peer, uint32_t freed) {
  peers_[peer].creditValue = freed;
  sendCredit(peer);
}

void Group::sendCredit(uint32_t peer) {
  Peer& p = peers_[peer];
  core::Operation& op = p.credit.op;
  if (op.inFlight || op.queued) {
    p.creditOwed = true;  // sent again, with the latest count, when this one is done
    return;
  }
  p.creditOwed = false;
  if (closing_ || p.dead || !p.joined) return;
  // No bytes: the immediate data is the message. Any address of the source's ring will do.
  op.type = core::OpType::kWrite;
  op.rail = 0;
  op.peer = p.addr[0];
  op.toOwnEndpoint = peer == rank_;
  op.buffer = ring_;
  op.length = 0;
  op.desc = ringMh_->desc;
  op.remoteAddress = p.ringAddress;
  op.remoteKey = p.ringKey;
  op.tag = encode(ImmKind::kCredit, linkAt(peer), p.creditValue);
  if (injectLimit_ > 0 && device().inject(op) == abi::kSuccess) return;
  if (postOp(op) != abi::kSuccess) targetError("cannot send credits to rank %u", peer);
}

bool Group::postRead(uint32_t index, uint32_t windowIndex, uint64_t offset) {
  const Window& window = *windows_[windowIndex];
  core::Operation& op = wordOps_[index].op;
  op.type = core::OpType::kRead;
  op.rail = 0;
  op.peer = peers_[rank_].addr[0];
  op.buffer = stagingWord(index);
  op.length = sizeof(uint64_t);
  op.desc = ringMh_->desc;
  op.remoteAddress = window.mh->remoteAddress(window.base + offset);
  op.remoteKey = window.mh->key();
  if (postOp(op) == abi::kSuccess) return true;
  targetError("cannot read a GPU signal word (window %u, offset %llu)", windowIndex,
              static_cast<unsigned long long>(offset));
  return false;
}

bool Group::postWrite(uint32_t index, uint32_t windowIndex, uint64_t offset, uint64_t value) {
  const Window& window = *windows_[windowIndex];
  core::Operation& op = wordOps_[index].op;
  *stagingWord(index) = value;
  op.type = core::OpType::kWrite;
  op.rail = 0;
  op.peer = peers_[rank_].addr[0];
  op.toOwnEndpoint = true;
  op.buffer = stagingWord(index);
  op.length = sizeof(uint64_t);
  op.desc = ringMh_->desc;
  op.remoteAddress = window.mh->remoteAddress(window.base + offset);
  op.remoteKey = window.mh->key();
  // Link 0 belongs to no group: the landed write is dropped by the engine.
  op.tag = encode(ImmKind::kPlain, 0, 0);
  if (postOp(op) == abi::kSuccess) return true;
  targetError("cannot write a GPU signal word (window %u, offset %llu)", windowIndex,
              static_cast<unsigned long long>(offset));
  return false;
}

void Group::onWordDone(WordOp& wordOp, bool ok) {
  if (!ok) targetError("a loopback access to a GPU signal word failed");
  if (wordOp.op.type == core::OpType::kRead) {
    words_->onRead(wordOp.index, *stagingWord(wordOp.index), ok);
  } else {
    words_->onWrite(wordOp.index, ok);
  }
  if (!blockedPeers_.empty()) retryBlocked();
}

}  // namespace nnf::rma
