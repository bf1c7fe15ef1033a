#include "core/data_comm.h"

#include <algorithm>

#include <rdma/fi_errno.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/device.h"
#include "core/tags.h"
#include "core/wire.h"
#include "log/log.h"

namespace nnf::core {
namespace {
// Distinct NCCL tags one comm can carry; NCCL uses one per peer rank sharing the connection.
constexpr size_t kTagsPerComm = 256;
}  // namespace

DataComm::DataComm(Device& device, Kind kind, uint32_t id, size_t requests, OpPool* ops,
                   size_t inlineOps)
    : Comm(device, kind, id),
      pool_(this, requests, ops, inlineOps),
      flushPool_(this, kind == Kind::kRecv ? abi::kMaxRequests : 0, nullptr),
      sequences_(kTagsPerComm, 8,
                 static_cast<uint32_t>(device.config().integer(config::Param::kSequenceStart))) {
  peerCheckNs_ =
      static_cast<uint64_t>(device.config().integer(config::Param::kPeerCheckMs)) * 1000000;
  requestTimeoutNs_ =
      static_cast<uint64_t>(device.config().integer(config::Param::kRequestTimeoutS)) * 1000000000;
  // A local-only provider (shm) accepts messages for a dead process without complaint, so a
  // ping proves nothing there; the pid check covers it.
  pingsDetectDeath_ = !device.localOnly();
  pingSend_.owner = this;
}

DataComm::~DataComm() {
  // Operations dropped without completing (a dead peer's, or the device's teardown) still hold
  // their registrations.
  forEachRequest([this](Request& request) { releaseRegistration(request); });
}

void DataComm::releaseRegistrations() {
  forEachRequest([this](Request& request) { releaseRegistration(request); });
  device().protocol().releaseRegistrations(*this);
}

void DataComm::releaseRegistration(Request& request) {
  for (int i = 0; i < request.count; ++i) releaseRegistration(request.ops[i]);
  if (request.heldRegistration == nullptr) return;
  endUse(request.heldRegistration);
  request.heldRegistration = nullptr;
}

bool DataComm::tooManyTags() {
  NNF_WARN("comm %u carries more than %zu distinct NCCL tags", id(), sequences_.capacity());
  return false;
}

bool DataComm::adoptPeerRails(const wire::RailAddresses& peerRails, const char* who) {
  const uint8_t* addresses[wire::kMaxRails] = {};
  for (size_t r = 1; r < peerRails.rails && r < wire::kMaxRails; ++r) {
    addresses[r] = peerRails.railAddresses[r - 1];
  }
  return adoptRails(peerRails.rails, addresses, peerRails.railAddressLength, who);
}

bool DataComm::adoptListenerRails(const wire::ListenHandle& handle) {
  const uint8_t* addresses[wire::kMaxRails] = {};
  for (size_t r = 1; r < handle.rails && r < wire::kMaxRails; ++r) {
    addresses[r] = handle.railAddress(r);
  }
  return adoptRails(handle.rails, addresses, handle.addressLength, "the listener");
}

bool DataComm::adoptRails(size_t peerRails, const uint8_t* const* addresses, size_t length,
                          const char* who) {
  size_t rails = std::min<size_t>(device().railCount(), peerRails);
  for (size_t r = 1; r < rails; ++r) {
    int ret = device().peerAddress(addresses[r], length, &railPeers_[r - 1], r);
    if (ret != 0) {
      NNF_WARN("connection of comm %u failed: cannot add the address of %s on NIC %s: %s", id(),
               who, device().railNames()[r].c_str(), fi_strerror(-ret));
      return false;
    }
  }
  rails_ = rails;
  pathsDown_ = device().pathsDownOf(*this);  // a path that broke before this comm connected
  return true;
}

size_t DataComm::setUpRail(size_t preferred) const {
  const RailHealth& health = device().railHealth();
  if (preferred < rails_ && (health.usable(rails_, pathsDown_) & (1u << preferred)) != 0) {
    return preferred;
  }
  return health.firstUp(rails_, pathsDown_);
}

void DataComm::forEachOwnInFlightOn(size_t rail, const std::function<void(Operation&)>& visit) {
  auto onRail = [&](Operation& op) {
    if (op.inFlight && op.rail == rail) visit(op);
  };
  onRail(pingSend_);
  onRail(setUpSend());
  device().protocol().forEachOwn(*this, onRail);
}

uint32_t DataComm::railsWriting() {
  uint32_t busy = 0;
  forEachRequest([&](Request& request) {
    for (int i = 0; i < request.count; ++i) {
      const Operation& op = request.ops[i];
      if (op.inFlight && op.type == OpType::kWrite) busy |= 1u << op.rail;
    }
  });
  auto own = [&busy](const Operation& op) {
    if (op.inFlight) busy |= 1u << op.rail;
  };
  own(pingSend_);
  own(setUpSend());
  device().protocol().forEachOwn(*this, own);
  return busy;
}

void DataComm::setPeerIdentity(uint32_t pid, uint64_t hostId) {
  peerPid_ = pid;
  peerLocal_ = hostId == wire::localHostId();
}

void DataComm::checkStalledNow(Request& request) {
  uint64_t now = device().nowNs();
  // The first check stamps the request: it runs a few polls after posting, close enough for
  // limits counted in milliseconds and seconds.
  if (request.postedNs == 0) request.postedNs = now;
  uint64_t waited = now - request.postedNs;
  device().protocol().onWaiting(*this, request, waited);
  if (peerCheckNs_ == 0 && requestTimeoutNs_ == 0) return;
  if (requestTimeoutNs_ != 0 && waited > requestTimeoutNs_ &&
      request.state == Request::State::kActive) {
    NNF_WARN(
        "a request on comm %u waited %llu s without completing (NCCL_FABRIC_REQUEST_TIMEOUT_S)",
        id(), static_cast<unsigned long long>(waited / 1000000000));
    request.state = Request::State::kFailed;
    request.error = abi::kRemoteError;
    for (int i = 0; i < request.count; ++i) cancel(request.ops[i]);
    return;
  }
  if (peerCheckNs_ == 0 || waited < peerCheckNs_ || now - lastPeerCheckNs_ < peerCheckNs_) return;
  lastPeerCheckNs_ = now;
  if (peerProcessExited(/*quiet=*/false)) return;
  if (pingsDetectDeath_) sendPing();
}

bool DataComm::peerProcessExited(bool quiet) {
  if (!peerLocal_ || peerPid_ == 0) return false;
  if (kill(static_cast<pid_t>(peerPid_), 0) == 0 || errno != ESRCH) return false;
  char why[64];
  snprintf(why, sizeof(why), "peer process %u has exited", peerPid_);
  failPeer(why, quiet);
  return true;
}

void DataComm::sendPing() {
  sendPingVia(device().railHealth().firstUp(rails_, pathsDown_));
}

void DataComm::pingForWitness(uint32_t stuck) {
  // Not on a rail it is to witness for (the leader, whose control messages it would follow).
  uint32_t rails = device().railHealth().usable(rails_, pathsDown_) & ~stuck;
  if (rails != 0) sendPingVia(static_cast<size_t>(__builtin_ctz(rails)));
}

void DataComm::sendPingVia(size_t rail) {
  if (pingSend_.inFlight || pingSend_.queued || control().data == nullptr) return;
  // A header only, from the end of the comm's control slot (the set-up message is done by now).
  uint8_t* buffer = control().data + ControlSlot::kSize - sizeof(wire::ControlHeader);
  device().controlChannel().sendVia(rail, pingSend_, buffer, control(), *this,
                                    wire::ControlKind::kPing, nullptr, 0);
}

void DataComm::failPeer(const char* why, bool quiet) {
  if (peerFailed_) return;
  peerFailed_ = true;
  if (errorReported_ || quiet) {
    NNF_INFO(abi::kLogSubsysNet, "comm %u: %s; failing its pending requests", id(), why);
  } else {
    NNF_WARN("comm %u: %s; failing its pending requests", id(), why);
  }
  errorReported_ = true;
  forEachRequest([this](Request& request) {
    if (request.state != Request::State::kActive) return;
    request.state = Request::State::kFailed;
    request.error = abi::kRemoteError;
    for (int i = 0; i < request.count; ++i) cancel(request.ops[i]);
  });
}

void DataComm::failUnposted(const char* why) {
  peerClosed_ = true;  // isend and irecv refuse from now on; the peer is not dead (peerGone)
  int failed = 0;
  forEachRequest([&failed](Request& request) {
    if (request.state != Request::State::kActive) return;
    for (int i = 0; i < request.count; ++i) {
      if (request.ops[i].inFlight || request.ops[i].queued) return;
    }
    request.state = Request::State::kFailed;
    request.error = abi::kRemoteError;
    ++failed;
  });
  if (failed > 0 && !errorReported_ && !closed()) {
    errorReported_ = true;
    NNF_WARN("comm %u: %s; failing its %d request(s) that wait for it", id(), why, failed);
  } else {
    NNF_INFO(abi::kLogSubsysNet, "comm %u: %s (%d request(s) waiting)", id(), why, failed);
  }
}

void DataComm::onPing(Operation& op, int error, const char* text) {
  // A closing comm still listens to its pings: their failure ends the wait for its operations.
  if (error != 0 && error != FI_ECANCELED) {
    // A ping lost with its rail says nothing of the peer: it goes again on a rail up.
    if (device().controlChannel().sendAgain(op, control(), *this, error)) return;
    char why[160];
    snprintf(why, sizeof(why), "peer unreachable (%s: %s)", fi_strerror(error),
             text != nullptr ? text : "");
    failPeer(why, closed());
  }
}

void DataComm::onComplete(Operation& op, size_t length) {
  releaseRegistration(op);
  Request* request = op.request;
  if (request == nullptr) {
    if (rails_ > 1) silence_.landed(op.rail);  // the peer (its NIC there) took it
    if (isPing(op)) {
      onPing(op, 0, nullptr);
    } else if (!device().protocol().onOwnCompletion(*this, op, 0)) {
      onControlComplete(op, length);
    }
    return;
  }
  if (op.type == OpType::kRecv && length > op.length) {
    // Posted with room after the buffer: the rest of the message went there, and this receive
    // alone fails, as the provider would have truncated it.
    if (device().scratch() != nullptr) device().scratch()->landed(length - op.length);
    onError(op, FI_ETRUNC, length - op.length, nullptr);
    return;
  }
  if (op.type == OpType::kWrite) {
    if (rails_ > 1) silence_.landed(op.rail);
    if (device().protocol().continueWrite(*this, op)) return;  // the next segment is posted
    op.transferred += op.length;
  } else if (op.type == OpType::kRead && device().protocol().onRequestRead(*this, op, 0)) {
    // sized by the protocol
  } else {
    op.transferred = op.type == OpType::kSend ? op.length : length;
  }
  if (--request->remaining == 0) {
    releaseRegistration(*request);
    finish(*request);
  }
  if (op.type == OpType::kWrite) device().protocol().onWriteDone(*this);
}

bool DataComm::readAgain(Operation& op, int error) {
  if (closed() || op.request->state != Request::State::kActive || op.heldRegistration == nullptr) {
    return false;
  }
  // A read of our own: no path to a peer, only our NICs (every buffer is registered on each).
  Device& dev = device();
  int rail = dev.railHealth().railInsteadOf(op.rail, error, dev.railCount(), 0);
  if (rail < 0) return false;
  const bool flush = flushPool_.owns(op.request);
  if (flush) {
    // A flush: into the device's word, from the receive buffer's registration.
    op.desc = dev.flushWord()->descOn(static_cast<size_t>(rail));
    op.remoteKey = op.heldRegistration->key(static_cast<size_t>(rail));
  } else if (!dev.protocol().readOn(*this, op, static_cast<size_t>(rail))) {
    return false;
  }
  NNF_INFO(abi::kLogSubsysNet, "comm %u: a %s failed with rail %u; read again through rail %d",
           id(), flush ? "flush read" : "copy into GPU memory", op.rail, rail);
  op.rail = static_cast<uint8_t>(rail);
  op.peer = dev.selfAddress(static_cast<size_t>(rail));
  return dev.post(op) == abi::kSuccess;
}

void DataComm::forgetInProtocol(Request& request) {
  device().protocol().forget(*this, request);
}

void DataComm::finish(Request& request) {
  if (request.state == Request::State::kActive) request.state = Request::State::kDone;
  if (request.state == Request::State::kAbandoned) poolOf(request).release(&request);
}

void DataComm::onError(Operation& op, int error, size_t overflow, const char* text) {
  if (op.type == OpType::kRead && op.request != nullptr && readAgain(op, error)) return;
  releaseRegistration(op);
  Request* request = op.request;
  if (request == nullptr) {
    if (isPing(op)) {
      onPing(op, error, text);
    } else if (!device().protocol().onOwnCompletion(*this, op, error)) {
      onControlError(op, error, text);
    }
    return;
  }
  // A write on a rail whose path broke may go again on another (the rdma protocol's recovery):
  // the request stays pending meanwhile. So does a refused send's notice, whose request failed
  // already.
  if (op.type == OpType::kWrite &&
      (request->state == Request::State::kActive || op.segment.notice != 0) && !closed() &&
      device().protocol().onWriteFailed(*this, op, error)) {
    return;
  }
  // A closing receiver waits for the sender's last write to end, however it ends.
  struct WriteDone {
    DataComm& comm;
    bool write;
    ~WriteDone() {
      if (write) comm.device().protocol().onWriteDone(comm);
    }
  } writeDone{*this, op.type == OpType::kWrite};
  if (op.type == OpType::kRead) device().protocol().onRequestRead(*this, op, error);
  if (--request->remaining == 0) releaseRegistration(*request);
  if (request->state != Request::State::kActive) {  // already failed: one WARN is enough
    if (request->remaining == 0) finish(*request);
    return;
  }
  request->state = Request::State::kFailed;
  if (error == FI_ECANCELED && closed()) {
    request->error = abi::kSuccess;
    return;
  }
  if (error == FI_ETRUNC) {
    // Providers do not all report the overflow length (tcp leaves it 0 for small messages).
    if (overflow > 0) {
      NNF_WARN(
          "receive truncated on comm %u: the sender sent %zu bytes more than the %zu-byte"
          " buffer (tag %d)",
          id(), overflow, op.length, tags::ncclTag(op.tag));
    } else {
      NNF_WARN(
          "receive truncated on comm %u: the sender sent more than the %zu-byte buffer (tag %d)",
          id(), op.length, tags::ncclTag(op.tag));
    }
    request->error = abi::kInternalError;
    return;
  }
  request->error = abi::kRemoteError;
  const char* what = opTypeName(op.type);
  if (errorReported_ || refusesRequests()) {
    NNF_INFO(abi::kLogSubsysNet, "%s of %zu bytes on comm %u failed too: %s", what, op.length, id(),
             fi_strerror(error));
    return;
  }
  errorReported_ = true;
  // Some providers' detail text only repeats the error name.
  bool detail = text != nullptr && *text != '\0' && strcmp(text, fi_strerror(error)) != 0;
  NNF_WARN("%s of %zu bytes on comm %u failed: %s%s%s%s", what, op.length, id(), fi_strerror(error),
           detail ? " (" : "", detail ? text : "", detail ? ")" : "");
}

void DataComm::abandon(Request& request) {
  int held = 0;
  for (int i = 0; i < request.count; ++i) {
    Operation& op = request.ops[i];
    if (op.queued) device().unqueue(op);
    if (op.inFlight) {
      device().cancel(op);
      ++held;
    } else {
      releaseRegistration(op);
    }
  }
  request.remaining = static_cast<uint8_t>(held);
  if (held == 0) {
    releaseRegistration(request);
    poolOf(request).release(&request);
  } else {
    request.state = Request::State::kAbandoned;
  }
}

int DataComm::inFlight() const {
  // Queued ones too: the device's retry queue would post them after the comm went.
  const Operation& setUp = const_cast<DataComm*>(this)->setUpSend();
  int count = (setUp.inFlight || setUp.queued ? 1 : 0) +
              (pingSend_.inFlight || pingSend_.queued ? 1 : 0) +
              device().protocol().ownInFlight(*this);
  const_cast<DataComm*>(this)->forEachRequest([&count](const Request& request) {
    // Queued ones too: a closed comm keeps its sends and writes in the retry queue.
    for (int i = 0; i < request.count; ++i) {
      count += request.ops[i].inFlight || request.ops[i].queued ? 1 : 0;
    }
  });
  return count;
}

int DataComm::callerOpsInFlight() const {
  int count = device().protocol().peerWritesPending(*this);
  const_cast<DataComm*>(this)->forEachRequest([&count](const Request& request) {
    if (request.state == Request::State::kFree) return;
    for (int i = 0; i < request.count; ++i) {
      count += request.ops[i].inFlight || request.ops[i].queued ? 1 : 0;
    }
  });
  return count;
}

bool DataComm::peerGone() {
  if (peerFailed_) return true;
  if (peerLocal_ && peerPid_ != 0) return peerProcessExited(/*quiet=*/true);
  // Elsewhere a ping tells: its failure (onPing) marks the peer failed.
  if (pingsDetectDeath_ && peerCheckNs_ != 0 && remoteId_ != 0) sendPing();
  return false;
}

void DataComm::cancelInFlight() {
  cancel(setUpSend());
  device().protocol().cancelOwn(*this);
  cancel(pingSend_);
  forEachRequest([this](Request& request) {
    if (request.state == Request::State::kFree) return;
    for (int i = 0; i < request.count; ++i) {
      Operation& op = request.ops[i];
      // A send or write waiting for room at the provider still goes: the peer expects it (rdma:
      // the receiver described its buffer), and the close waits for it as for one posted.
      if (op.queued && (op.type == OpType::kSend || op.type == OpType::kWrite)) continue;
      cancel(op);
    }
  });
  // After the requests: the rdma sender's close acknowledgement waits for its writes, queued
  // ones included.
  device().protocol().onClose(*this);
}

}  // namespace nnf::core
