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
  // The receiver counts a buffer's segments per rail, and forgets the rail's count before it
  // answers: where another share of the buffer went on this rail too (one written again onto it
  // after its own rail failed, or this rail's own share when this one was written again), that
  // would forget the other share's bytes as well, and the buffer would never end. The request
  // fails instead (two rails failing under one striped message). An eager message is named by its
  // entry and generation, on any rail; a void by its buffer, whose count it is not part of.
  if (!eager && !isVoidWrite && sharesItsRail(op)) return false;
  // Another rail of the comm must be usable to write the share on (the device took this one, or
  // its path to our peer, down).
  uint32_t others = comm_.device().railHealth().usable(rails, comm_.pathsDown()) & ~(1u << op.rail);
  if (others == 0) return false;
  if (!doubts_) doubts_.reset(new (std::nothrow) Doubt[kCapacity]);
  if (!doubts_ || count_ == kCapacity) return false;
  doubts_[count_++] = Doubt{&op, ShareDoubt::kUnresolved};
  return true;
}

bool SendRecovery::sharesItsRail(const core::Operation& op) {
  const core::Request& request = *op.request;
  for (uint8_t i = 0; i < request.count; ++i) {
    if (&request.ops[i] != &op && request.ops[i].rail == op.rail) return true;
  }
  return false;
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
    RecoveryKind kind = eager         ? RecoveryKind::kEagerQuery
                        : isVoidWrite ? RecoveryKind::kVoidQuery
                                      : RecoveryKind::kQuery;
    // An eager message is named by its entry and its generation there (the immediate's count).
    RailQuery query{static_cast<uint32_t>(kind),
                    imm.slot,
                    eager ? imm.count : imm.index,
                    op.segment.tag,
                    op.segment.seq,
                    op.rail,
                    op.transferred + op.length + op.segment.shareLeft,
                    eager || isVoidWrite ? 0 : rdma_.writeSegmentBytes()};
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
    remove(i);
    awaitingAnswer_ = false;
    if (answer.resend != 0) {
      writeAgain(op);
    } else {
      settle(op);
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

// The receiver forgot what landed of the share and waits for it: the whole share goes again on a
// rail that is up, with the keys its descriptor gave for that rail (the ring entry cannot have
// been written again: its group waits for this share).
void SendRecovery::writeAgain(core::Operation& op) {
  uint8_t carrying[kMaxRails];
  size_t rails = comm_.device().railHealth().carrying(comm_.rails(), carrying, comm_.pathsDown());
  size_t rail = carrying[nextRail_++ % rails];
  if (rail == op.rail) rail = carrying[nextRail_++ % rails];
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
