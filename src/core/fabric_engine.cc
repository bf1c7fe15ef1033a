#include "core/fabric_engine.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/scratch_area.h"
#include "log/log.h"

namespace nnf::core {
namespace {
// Receives posted at once, whatever smaller size a provider states (see setLimits).
constexpr size_t kMinReceiveLimit = 1024;
// Operations refused with -FI_EAGAIN before a retry pass stops (see retryQueued).
constexpr int kRefusalsPerPass = 8;
// Operations that wait this long for a slot in the provider's queue are reported (once).
constexpr uint64_t kWaitingWarnNs = 10ull * 1000000000;
}  // namespace

FabricEngine::FabricEngine(std::vector<fabric::Rail*> rails, Settings settings)
    : rails_(std::move(rails)), settings_(std::move(settings)) {
  completions_.resize(std::max<size_t>(settings_.cqReadCount, 1));
  setLimits(rails_.front()->info());
}

void FabricEngine::setLimits(const fi_info* leader) {
  // Without a stated size the provider's -FI_EAGAIN is the only limit.
  constexpr size_t kUnbounded = ~size_t{0};
  rx_.limit =
      leader->rx_attr != nullptr && leader->rx_attr->size > 0 ? leader->rx_attr->size : kUnbounded;
  // Providers that state fewer (tcp in libfabric 2.x: 256) take more, or say -FI_EAGAIN: the
  // control ring and the drains alone need 320.
  rx_.limit = std::max(rx_.limit, kMinReceiveLimit);
  tx_.limit =
      leader->tx_attr != nullptr && leader->tx_attr->size > 0 ? leader->tx_attr->size : kUnbounded;
  NNF_INFO(abi::kLogSubsysInit,
           "%s: provider queues: %zu receives (the device's control and drain receives among "
           "them), %zu sends; more wait in the plugin",
           settings_.deviceName.c_str(), rx_.limit, tx_.limit);
}

abi::Result FabricEngine::postNow(Operation& op, ssize_t* ret) {
  fabric::Rail& rail = *rails_[op.rail];
  switch (op.type) {
    case OpType::kSend:
      *ret = rail.tsend(op.buffer, op.length, op.desc, op.peer, op.tag, &op.context);
      break;
    case OpType::kRecv:
      if (op.withRoom) {
        *ret = rail.trecvWithRoom(op.buffer, op.length, op.desc, room_->data(), room_->size(),
                                  room_->desc(), op.tag, &op.context);
        break;
      }
      *ret =
          rail.trecv(op.buffer, op.length, op.desc, FI_ADDR_UNSPEC, op.tag, op.ignore, &op.context);
      break;
    case OpType::kControlSend:
      *ret = rail.send(op.buffer, op.length, op.desc, op.peer, &op.context);
      break;
    case OpType::kControlRecv:
      *ret = rail.recv(op.buffer, op.length, op.desc, &op.context);
      break;
    case OpType::kRead:
      *ret = rail.read(op.buffer, op.length, op.desc, op.peer, op.remoteAddress, op.remoteKey,
                       &op.context);
      break;
    case OpType::kWrite:
      if (op.headerLength != 0) {
        *ret =
            rail.writedata2(op.header, op.headerLength, op.headerDesc, op.buffer, op.length,
                            op.desc, op.tag, op.peer, op.remoteAddress, op.remoteKey, &op.context);
        break;
      }
      *ret = rail.writedata(op.buffer, op.length, op.desc, op.tag, op.peer, op.remoteAddress,
                            op.remoteKey, &op.context);
      break;
  }
  abi::Result result = postResult(op, *ret);
  if (result == abi::kSuccess) {
    op.inFlight = true;
    ++laneOf(op).posted;
  }
  return result;
}

abi::Result FabricEngine::postResult(const Operation& op, ssize_t ret) const {
  if (ret == 0) return abi::kSuccess;
  if (ret == -FI_EAGAIN || (ret == -FI_EOPNOTSUPP && op.toOwnEndpoint)) return abi::kInProgress;
  NNF_WARN("posting a %zu-byte %s on device %d failed: %s", op.length, opTypeName(op.type),
           settings_.deviceIndex, fabric::errorText(static_cast<int>(ret)).c_str());
  return abi::kSystemError;
}

abi::Result FabricEngine::post(Operation& op) {
  Lane& lane = laneOf(op);
  if (lane.waiting.empty() && lane.posted < lane.limit) {
    ssize_t ret = 0;
    abi::Result result = postNow(op, &ret);
    if (result != abi::kInProgress) return result;
  }
  // The provider is out of resources, our share of its queue is in use, or others already
  // wait: keep the order. Completions make room and progress() posts them.
  lane.waiting.push(op);
  return abi::kSuccess;
}

abi::Result FabricEngine::inject(const Operation& op) {
  if (!tx_.waiting.empty()) return abi::kInProgress;
  if (op.type == OpType::kWrite) {
    return postResult(op, rails_[op.rail]->injectWritedata(op.buffer, op.length, op.tag, op.peer,
                                                           op.remoteAddress, op.remoteKey));
  }
  return postResult(op, rails_.front()->tinject(op.buffer, op.length, op.peer, op.tag));
}

void FabricEngine::retryQueued(Lane& lane, EngineEvents& events) {
  // -FI_EAGAIN can concern one peer only (rxm while it connects to an address that refuses):
  // an operation refused stays in place and the next ones are tried, a few refusals per pass,
  // so that one unreachable peer does not hold up every other. Order between operations does
  // not matter for matching (sequence numbers in the tags).
  int refusals = 0;
  Operation* op = lane.waiting.front();
  while (op != nullptr && lane.posted < lane.limit && refusals < kRefusalsPerPass) {
    Operation* next = op->nextQueued;
    ssize_t ret = 0;
    abi::Result result = postNow(*op, &ret);
    if (result == abi::kInProgress) {
      ++refusals;
    } else {
      lane.waiting.remove(*op);
      if (result != abi::kSuccess) {
        // The failure belongs to the operation's request; report it there.
        events.onTransferError(op->rail, *op, static_cast<int>(-ret), "posting failed");
        op->owner->onError(*op, static_cast<int>(-ret), 0, "posting failed");
      }
    }
    op = next;
  }
  checkWaiting(lane);
}

void FabricEngine::checkWaiting(Lane& lane) {
  if (lane.waiting.empty()) {
    lane.fullSinceNs = 0;
    return;
  }
  uint64_t now = nowNs();
  if (lane.fullSinceNs == 0) lane.fullSinceNs = now;
  if (lane.warned || now - lane.fullSinceNs < kWaitingWarnNs) return;
  lane.warned = true;
  NNF_WARN(
      "device %d: %zu %s operation(s) have waited over %llu s for a slot in the provider's %s "
      "queue (%zu posted, limit %zu): the peer is not taking messages, or more are in flight "
      "than the provider holds (raise its queue size, e.g. FI_SHM_RX_SIZE / FI_OFI_RXM_RX_SIZE, "
      "or keep fewer requests outstanding)",
      settings_.deviceIndex, lane.waiting.size(), lane.name,
      static_cast<unsigned long long>(kWaitingWarnNs / 1000000000), lane.name, lane.posted,
      lane.limit);
}

abi::Result FabricEngine::progress(EngineEvents& events) {
  // The leader last: a control message read in this call comes after everything the other rails
  // delivered before it was sent (the rdma protocol's question about a write that failed on a
  // rail must find what landed of it counted already: docs/architecture.md, "A rail that fails").
  for (size_t r = 1; r <= rails_.size(); ++r) {
    abi::Result result = readRail(r % rails_.size(), events);
    if (result != abi::kSuccess) return result;
  }
  if (!rx_.waiting.empty() || rx_.fullSinceNs != 0) retryQueued(rx_, events);
  if (!tx_.waiting.empty() || tx_.fullSinceNs != 0) retryQueued(tx_, events);
  if (--eventCheckCountdown_ == 0) checkEvents(events);
  return abi::kSuccess;
}

void FabricEngine::checkEvents(EngineEvents& events) {
  eventCheckCountdown_ = kEventCheckInterval;
  std::string text;
  int error = 0;
  for (size_t r = 0; r < rails_.size(); ++r) {
    while (rails_[r]->readEventError(&error, &text)) events.onEndpointError(r, error, text.c_str());
  }
}

abi::Result FabricEngine::readRail(size_t index, EngineEvents& events) {
  fabric::Rail& rail = *rails_[index];
  for (;;) {
    ssize_t count = rail.readCompletions(completions_.data(), completions_.size());
    if (count > 0) {
      for (ssize_t i = 0; i < count; ++i) {
        const fi_cq_tagged_entry& entry = completions_[i];
        // A peer's write: remote CQ data without a receive of ours. Its op_context is not ours
        // (NULL, or a provider's value on shm 2.x): never dereference it.
        if ((entry.flags & FI_REMOTE_CQ_DATA) != 0 && (entry.flags & FI_RECV) == 0) {
          events.onRemoteWrite(index, entry.data, entry.len);
          continue;
        }
        Operation* op = Operation::fromContext(entry.op_context);
        op->inFlight = false;
        --laneOf(*op).posted;
        op->owner->onComplete(*op, entry.len);
      }
      if (static_cast<size_t>(count) < completions_.size()) break;
      continue;
    }
    if (count == -FI_EAGAIN) break;
    if (count == -FI_EAVAIL) {
      dispatchError(index, events);
      continue;
    }
    NNF_WARN("reading the completion queue of device %d (NIC %s) failed: %s", settings_.deviceIndex,
             railName(index), fabric::errorText(static_cast<int>(count)).c_str());
    return abi::kSystemError;
  }
  return abi::kSuccess;
}

void FabricEngine::dispatchError(size_t railIndex, EngineEvents& events) {
  fabric::Rail& rail = *rails_[railIndex];
  fi_cq_err_entry entry;
  const char* text = nullptr;
  ssize_t ret = rail.readError(&entry, &text);
  if (ret <= 0) return;
  if (entry.op_context == nullptr) {
    // A peer's write that failed here (EFA: an unsolicited write receive): its immediate data
    // names the comm, which fails rather than wait for data that will not come.
    int error = entry.err < 0 ? -entry.err : entry.err;
    char why[224];
    snprintf(why, sizeof(why), "a write of the peer's failed at NIC %s: %s%s%s%s",
             railName(railIndex), fi_strerror(error), text != nullptr && *text != '\0' ? " (" : "",
             text != nullptr ? text : "", text != nullptr && *text != '\0' ? ")" : "");
    if ((entry.flags & FI_REMOTE_CQ_DATA) != 0 && events.onRemoteWriteError(entry.data, why)) {
      return;
    }
    if (!unattributedErrorReported_) {
      unattributedErrorReported_ = true;
      NNF_WARN("device %d: an error completion names no operation and no comm: %s",
               settings_.deviceIndex, why);
    }
    return;
  }
  Operation* op = Operation::fromContext(entry.op_context);
  op->inFlight = false;
  --laneOf(*op).posted;
  // shm in libfabric 1.17 reports a truncation as -FI_ETRUNC: errors are positive elsewhere.
  int error = entry.err < 0 ? -entry.err : entry.err;
  events.onTransferError(railIndex, *op, error, text);
  op->owner->onError(*op, error, entry.olen, text);
}

}  // namespace nnf::core
