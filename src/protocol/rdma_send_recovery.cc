#include "protocol/rdma_send_recovery.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "core/device.h"
#include "core/wire.h"
#include "log/log.h"
#include "protocol/rdma_eager.h"

namespace nnf::protocol::rdma {

SendRecovery::SendRecovery(core::SendComm& comm, const RdmaDevice& rdma, const ArenaSlot& ring,
                           EagerHold& hold)
    : comm_(comm), rdma_(rdma), ring_(ring), hold_(hold) {
  question_.owner = &comm;
}

bool SendRecovery::onWriteFailed(core::Operation& op, int error) {
  Immediate imm = decode(op.tag);
  bool eager = imm.kind == ImmKind::kEager;
  if (!takeOver(op, imm, error)) {
    if (op.segment.resent != 0 && eager) releaseEager(op);  // it fails now
    return false;
  }
  if (eager) hold_.hold(imm.slot);
  askNext();
  return true;
}

bool SendRecovery::onVoidFailed(core::Operation& op, int error) {
  if (!takeOver(op, decode(op.tag), error)) return false;
  op.segment.resent = 1;  // held here: the void writer does not reuse it
  askNext();
  return true;
}

bool SendRecovery::takeOver(core::Operation& op, const Immediate& imm, int error) {
  size_t rails = comm_.rails();
  if (rails < 2 || !core::RailHealth::isPathFailure(error)) return false;
  // Data (not a truncation notice), or an eager message (posted: a comm of several rails injects
  // none, and the header-ahead ones go on one rail).
  bool eager = imm.kind == ImmKind::kEager;
  bool isVoidWrite = imm.kind == ImmKind::kVoid;
  if (!eager && !isVoidWrite &&
      (imm.kind != ImmKind::kData || (imm.segments == 0) != (op.segment.notice != 0))) {
    return false;
  }
  // Another rail of the comm must be usable to write the share on (the device took this one, or
  // its path to our peer, down).
  uint32_t others = comm_.device().railHealth().usable(rails, comm_.pathsDown()) & ~(1u << op.rail);
  if (others == 0) return false;
  if (!doubts_) doubts_.reset(new (std::nothrow) Doubt[kCapacity]);
  if (!doubts_ || count_ == kCapacity) return false;
  doubts_[count_++] = Doubt{&op, ShareDoubt::kUnresolved};
  return true;
}

bool SendRecovery::otherShareMovingOn(const core::Operation& op) {
  const core::Request& request = *op.request;
  for (uint8_t i = 0; i < request.count; ++i) {
    const core::Operation& other = request.ops[i];
    if (&other != &op && other.rail == op.rail && (other.inFlight || other.queued)) return true;
  }
  return false;
}

void SendRecovery::onWriteEnded() {
  if (count_ != 0) askNext();  // a share in doubt may have waited for this one
}

void SendRecovery::askNext() {
  if (awaitingAnswer_ || questionPending()) return;
  size_t i = 0;
  while (i < count_) {
    Doubt& doubt = doubts_[i];
    if (doubt.state != ShareDoubt::kUnresolved) {
      ++i;
      continue;
    }
    core::Operation& op = *doubt.op;
    Immediate imm = decode(op.tag);
    bool eager = imm.kind == ImmKind::kEager;
    bool isVoidWrite = imm.kind == ImmKind::kVoid;
    // The receiver forgets everything its buffer got on the rail: asked while another share of
    // the message still moves there, it would forget what lands of that one after it answered
    // (ignored there from then on) and the buffer would never end. Its end (failed: in doubt
    // too; completed: written again with this one) brings the question (onWriteEnded).
    if (!eager && !isVoidWrite && otherShareMovingOn(op)) {
      ++i;
      continue;
    }
    RecoveryKind kind = eager         ? RecoveryKind::kEagerQuery
                        : isVoidWrite ? RecoveryKind::kVoidQuery
                                      : RecoveryKind::kQuery;
    // An eager message is named by its entry and its generation there (the immediate's count).
    RailQuery query{static_cast<uint32_t>(kind),
                    imm.slot,
                    eager ? imm.count : imm.index,
                    op.segment.tag,
                    op.segment.seq,
                    op.rail};
    uint8_t* buffer = ring_->data + kRecoveryOffset;
    abi::Result sent = comm_.device().controlChannel().send(question_, buffer, *ring_, comm_,
                                                            core::wire::ControlKind::kProtocol,
                                                            &query, sizeof(query));
    if (sent != abi::kSuccess) {
      remove(i);  // `i` holds another one now
      fail(op, FI_EIO, "the question about it could not be sent");
      continue;
    }
    to(doubt, ShareDoubt::kAsked);
    awaitingAnswer_ = true;
    return;
  }
}

bool SendRecovery::onMessage(const uint8_t* data, size_t length) {
  RailAnswer answer;
  if (length < sizeof(answer)) return false;
  memcpy(&answer, data, sizeof(answer));
  bool eager = answer.kind == static_cast<uint32_t>(RecoveryKind::kEagerAnswer);
  if ((!eager && answer.kind != static_cast<uint32_t>(RecoveryKind::kAnswer) &&
       answer.kind != static_cast<uint32_t>(RecoveryKind::kVoidAnswer)) ||
      !awaitingAnswer_) {
    return false;
  }
  bool held = hold_.any();
  for (size_t i = 0; i < count_; ++i) {
    core::Operation& op = *doubts_[i].op;
    Immediate imm = decode(op.tag);
    if (doubts_[i].state != ShareDoubt::kAsked ||
        static_cast<uint32_t>(answerKind(op)) != answer.kind || imm.slot != answer.slot ||
        (eager ? imm.count : imm.index) != answer.index || op.rail != answer.rail) {
      continue;
    }
    awaitingAnswer_ = false;
    if (answer.kind == static_cast<uint32_t>(RecoveryKind::kAnswer)) {
      resolveRail(*op.request, op.rail, answer.resend != 0, answer.ignoredRails);
    } else {
      remove(i);
      if (answer.resend != 0) {
        writeAgain(op, 0);
      } else {
        settle(op);
      }
    }
    break;
  }
  askNext();
  return held && !hold_.any();
}

bool SendRecovery::onOwnCompletion(core::Operation& op, int error) {
  if (&op != &question_) return false;
  if (error != 0 && comm_.device().controlChannel().sendAgain(question_, *ring_, comm_, error)) {
    return true;  // its rail broke too: asked again on another
  }
  if (error != 0) {
    // The receiver will not answer: every share asked or waiting to be fails its request.
    awaitingAnswer_ = false;
    while (count_ > 0) {
      core::Operation& doubtful = *doubts_[count_ - 1].op;
      remove(count_ - 1);
      fail(doubtful, error, "the question about it could not be sent");
    }
    return true;
  }
  askNext();
  return true;
}

void SendRecovery::forget(const core::Request& request) {
  for (size_t i = count_; i-- > 0;) {
    core::Operation& op = *doubts_[i].op;
    if (op.request != &request) continue;
    // A refused send's notice stays: the receive waits for it, and it moves none of the caller's
    // bytes. Its request (failed, reported) returns to the pool once the notice ended.
    if (op.segment.notice != 0) continue;
    if (doubts_[i].state == ShareDoubt::kAsked) awaitingAnswer_ = false;  // the answer is dropped
    if (isEager(op)) releaseEager(op);
    remove(i);
    // The share still counts in the request's operations: it ends now, so that the request
    // returns to its pool.
    op.segment.resent = 1;
    comm_.onError(op, FI_ECANCELED, 0, nullptr);
  }
  askNext();
}

void SendRecovery::remove(size_t index) {
  // Order does not matter: the receiver answers about one share at a time, named in the answer.
  doubts_[index] = doubts_[count_ - 1];
  --count_;
}

// The receiver answered about `rail` for the buffer of `request`: with `resend` it forgot what
// landed there and waits for every share the message put on that rail (the one asked about, one
// in doubt beside it, and one that ended there before: their bytes went with the rail's count),
// each written again on a rail up that the buffer does not ignore (`ignored`); without, the
// buffer ended and those in doubt are done.
void SendRecovery::resolveRail(core::Request& request, uint8_t rail, bool resend,
                               uint32_t ignored) {
  // Nor on the rail of another share in doubt: its count there is still to be forgotten.
  uint32_t avoid = ignored | 1u << rail;
  for (size_t i = 0; i < count_; ++i) {
    if (doubts_[i].op->request == &request) avoid |= 1u << doubts_[i].op->rail;
  }
  // First every share of the rail leaves the list: settling one may end a write, whose end asks
  // the next question (onWriteEnded), which must not be about these.
  uint32_t shares = 0;  // bit k: request.ops[k] is to be written again or settled
  for (uint8_t k = 0; k < request.count; ++k) {
    core::Operation& op = request.ops[k];
    if (op.rail != rail) continue;
    size_t at = indexOf(op);
    if (at < count_) {
      remove(at);
    } else if (resend) {
      // It ended there (the question waited while it moved): counted by the receiver once, and
      // forgotten with the rail. It is the request's again until written again.
      NNF_ASSERT(!op.inFlight && !op.queued, "comm %u: a share moves on rail %u asked about",
                 comm_.id(), rail);
      op.transferred -= op.length;
      ++request.remaining;
      ++writtenBeside_;
    } else {
      continue;  // it ended there: counted, and the buffer ended
    }
    shares |= 1u << k;
  }
  for (uint8_t k = 0; k < request.count; ++k) {
    if ((shares >> k & 1u) == 0) continue;
    if (resend) {
      writeAgain(request.ops[k], avoid);
    } else {
      settle(request.ops[k]);
    }
  }
}

size_t SendRecovery::indexOf(const core::Operation& op) const {
  for (size_t i = 0; i < count_; ++i) {
    if (doubts_[i].op == &op) return i;
  }
  return count_;
}

// The receiver forgot what landed of the share and waits for it: the whole share goes again on a
// rail that is up and not in `avoid`, with the keys its descriptor gave for that rail (the ring
// entry cannot have been written again: its group waits for this share). An eager message or a
// void goes back on its own rail only where no other is up.
void SendRecovery::writeAgain(core::Operation& op, uint32_t avoid) {
  uint8_t carrying[kMaxRails];
  size_t rails = comm_.device().railHealth().carrying(comm_.rails(), carrying, comm_.pathsDown());
  size_t rail = kMaxRails, fallback = kMaxRails;
  for (size_t tries = 0; tries < rails; ++tries) {
    size_t candidate = carrying[nextRail_++ % rails];
    if ((avoid >> candidate & 1u) != 0) continue;
    if (candidate != op.rail) {
      rail = candidate;
      break;
    }
    fallback = candidate;
  }
  if (rail == kMaxRails) rail = fallback;
  if (rail == kMaxRails) {
    if (isEager(op)) releaseEager(op);
    // Not a path failure: the request fails rather than being asked about again.
    fail(op, FI_EIO, "no rail is left that its receiver counts");
    return;
  }
  if (isEager(op)) {
    writeEagerAgain(op, rail);
    return;
  }
  if (isVoid(op)) {
    writeVoidAgain(op, rail);
    return;
  }
  uint64_t share = op.transferred + op.length + op.segment.shareLeft;
  Immediate imm = decode(op.tag);
  const auto* described = reinterpret_cast<const BufferDescriptor*>(
      ring_->data + entryOffset(imm.slot) + imm.index * sizeof(BufferDescriptor));
  core::MemoryHandle* handle = op.request->heldRegistration;
  op.buffer = static_cast<char*>(op.buffer) - op.transferred;
  op.remoteAddress -= op.transferred;
  op.rail = static_cast<uint8_t>(rail);
  op.peer = comm_.peer(rail);
  op.desc = handle != nullptr ? handle->descOn(rail) : nullptr;
  op.remoteKey = described->keys[rail];
  op.length = std::min(share, rdma_.writeSegmentBytes());
  op.segment.shareLeft = share - op.length;
  op.segment.resent = 1;
  op.transferred = 0;
  // A notice's immediate carries the refused size, not a segment's length.
  if (rdma_.immediateCarriesLength() && op.segment.notice == 0) {
    op.tag = (op.tag & 0xffffffffu) | (uint64_t{op.length} << kLengthShift);
  }
  abi::Result result = comm_.device().post(op);
  if (result != abi::kSuccess) fail(op, FI_EIO, "writing it again could not be posted");
}

// The entry did not take the message: it goes again, whole (header and message), into the same
// entry on `rail`, with the same immediate (entry and generation). The area's keys on every rail
// are in the grant, which every credit write puts in our ring.
void SendRecovery::writeEagerAgain(core::Operation& op, size_t rail) {
  const auto* grant = reinterpret_cast<const Grant*>(ring_->data + kGrantOffset);
  core::MemoryHandle* handle = op.request->heldRegistration;
  op.rail = static_cast<uint8_t>(rail);
  op.peer = comm_.peer(rail);
  op.desc = handle != nullptr ? handle->descOn(rail) : nullptr;
  op.headerDesc = ring_->descOf(rail);
  op.remoteKey = grant->keys[rail];
  op.segment.resent = 1;
  op.transferred = 0;
  abi::Result result = comm_.device().post(op);
  if (result != abi::kSuccess) {
    releaseEager(op);
    fail(op, FI_EIO, "writing it again could not be posted");
  }
}

// The buffer still waits for the void: it goes again on `rail`, to the buffer its descriptor
// named there (the ring entry is still that group's: the slot waits for this void). It stays
// held (segment.resent) until it ends; failing again, it is asked about again.
void SendRecovery::writeVoidAgain(core::Operation& op, size_t rail) {
  Immediate imm = decode(op.tag);
  const auto* described = reinterpret_cast<const BufferDescriptor*>(
      ring_->data + entryOffset(imm.slot) + imm.index * sizeof(BufferDescriptor));
  op.rail = static_cast<uint8_t>(rail);
  op.peer = comm_.peer(rail);
  op.remoteAddress = described->address;
  op.remoteKey = described->keys[rail];
  if (comm_.device().post(op) != abi::kSuccess)
    fail(op, FI_EIO, "writing it again could not be posted");
}

bool SendRecovery::onWrittenAgain(const core::Operation& op) {
  return isEager(op) && releaseEager(op);
}

// The buffer ended at the receiver (the original landed): the share is done. Counted for the
// close by nobody (the receiver counted what landed; the failed write was not ours to count).
void SendRecovery::settle(core::Operation& op) {
  if (isVoid(op)) {
    op.segment.resent = 0;  // it landed: the void writer's again
    return;
  }
  if (isEager(op)) releaseEager(op);
  uint64_t share = op.transferred + op.length + op.segment.shareLeft;
  op.segment.shareLeft = 0;
  op.transferred = share - op.length;
  op.rail = kMaxRails;  // not a rail: continueWrite counts no write for it
  comm_.onComplete(op, 0);
}

void SendRecovery::fail(core::Operation& op, int error, const char* why) {
  if (isVoid(op)) {
    // No request fails: the void writer has the operation again, and the receiver keeps the
    // void's slot until the comm closes.
    op.segment.resent = 0;
    NNF_INFO(abi::kLogSubsysNet, "comm %u: a void on a failed rail is given up: %s", comm_.id(),
             why);
    return;
  }
  op.segment.resent = 1;  // so that onWriteFailed lets the request fail
  NNF_INFO(abi::kLogSubsysNet, "comm %u: a write on a failed rail is given up: %s", comm_.id(),
           why);
  comm_.onError(op, error, 0, why);
}

}  // namespace nnf::protocol::rdma
