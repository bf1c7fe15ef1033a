#include "core/device.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/clock.h"
#include "core/tags.h"
#include "log/log.h"
#include "platform/endpoint_options.h"
#include "platform/provider_rules.h"
#include "protocol/rdma.h"
#include "protocol/rdma_eager.h"
#include "protocol/rdma_wire.h"
#include "protocol/sendrecv.h"

namespace nnf::core {
namespace {
// Closed comm ids whose late messages are drained (one posted receive each).
constexpr size_t kDrainedIds = 256;
// Receives of the control channel, shared by every comm of the device.
constexpr size_t kControlReceives = 64;
// Receives posted at once, whatever smaller size a provider states (see setLimits).
constexpr size_t kMinReceiveLimit = 1024;
// Operations refused with -FI_EAGAIN before a retry pass stops (see retryQueued).
constexpr int kRefusalsPerPass = 8;
// Operations that wait this long for a slot in the provider's queue are reported (once).
constexpr uint64_t kWaitingWarnNs = 10ull * 1000000000;
}  // namespace

Device::Device(int index, const DeviceSpec& spec, const config::Config& config)
    : index_(index),
      config_(config),
      provider_(spec.rails.front()->fabric_attr->prov_name),
      properties_(spec.properties),
      railNames_(spec.railNames),
      gpus_(spec.gpus) {
  const fi_info* leader = spec.rails.front();
  localOnly_ = provider_ == "shm" ||
               ((leader->caps & FI_LOCAL_COMM) != 0 && (leader->caps & FI_REMOTE_COMM) == 0);
  std::string why;
  if (leader->ep_attr != nullptr &&
      !platform::tagFormatFits(leader->ep_attr->mem_tag_format, tags::kBitsUsed, &why)) {
    throw std::runtime_error(why + "; choose another provider with NCCL_FABRIC_PROVIDER");
  }
  openRails(spec);
  if (spec.rdma) {
    protocol_ = std::make_unique<protocol::Rdma>();
    immediateLength_ = true;
    for (const auto& rail : rails_) immediateLength_ = immediateLength_ && rail->cqDataSize() >= 8;
    // Segments of at most 2 GiB and of what the provider writes as one (EFA cuts a larger write
    // into pieces that each carry the immediate), at most 31 of them over every rail.
    writeSegmentBytes_ = protocol::rdma::kMaxSegmentBytes;
    const platform::ProviderRules& rules = platform::rulesFor(platform::familyOf(provider_));
    if (rules.largestWriteBytes > 0) {
      writeSegmentBytes_ = std::min<uint64_t>(writeSegmentBytes_, rules.largestWriteBytes);
    }
    for (const auto& rail : rails_) {
      size_t largest = 0;
      if (rail->sizeOption(platform::opt::kLevelEndpoint, platform::opt::kMaxRmaSize, &largest) ==
              0 &&
          largest > 0) {
        writeSegmentBytes_ = std::min<uint64_t>(writeSegmentBytes_, largest);
      }
    }
    properties_.maxMessageBytes = std::min<size_t>(
        properties_.maxMessageBytes,
        (protocol::rdma::kMaxSegments - protocol::rdma::kMaxRails) * writeSegmentBytes_);
    NNF_INFO(abi::kLogSubsysInit, "%s: RMA writes in segments of at most %llu bytes",
             properties_.name.c_str(), static_cast<unsigned long long>(writeSegmentBytes_));
    stripeMinBytes_ = static_cast<size_t>(config.integer(config::Param::kStripeMin));
  } else {
    protocol_ = std::make_unique<protocol::SendRecv>();
  }
  injectLimit_ = config.flag(config::Param::kInject) ? rail().injectSize() : 0;
  injectScratch_.resize(injectLimit_);
  completions_.resize(static_cast<size_t>(config.integer(config::Param::kCqReadCount)));

  cuda_ = spec.cuda;
  flushSetting_ = memory::flushSettingFromConfig(config);
  registrar_ = std::make_unique<memory::FabricRegistrar>(rail().domain(), rail().info(),
                                                         domainLock_, rail().endpoint());
  memory::Registrar* dataRegistrar = registrar_.get();
  if (rails_.size() > 1) {
    std::vector<memory::FabricRegistrar*> set{registrar_.get()};
    for (size_t r = 1; r < rails_.size(); ++r) {
      railRegistrars_.push_back(std::make_unique<memory::FabricRegistrar>(
          rails_[r]->domain(), rails_[r]->info(), domainLock_, rails_[r]->endpoint()));
      set.push_back(railRegistrars_.back().get());
    }
    railSet_ = std::make_unique<memory::RailSetRegistrar>(std::move(set));
    dataRegistrar = railSet_.get();
  }
  controlArena_ =
      std::make_unique<ControlArena>(rail().needsLocalRegistration() ? registrar_.get() : nullptr);
  if (spec.rdma) {
    rdmaArena_ = std::make_unique<ControlArena>(registrar_.get(), protocol::rdma::kArenaSlotBytes,
                                                FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE);
  }
  // The control ring and the drains are posted receives too: they count in the receive lane.
  size_t drainedIds = kDrainedIds;
  if (!platform::wildcardReceivesSafe(platform::familyOf(provider_), fi_version())) {
    drainedIds = 0;
    NNF_INFO(abi::kLogSubsysInit,
             "%s: late messages of closed comms are not drained (shm before libfabric 2.0 "
             "mismatches messages after a wildcard receive); they stay with the provider",
             properties_.name.c_str());
  }
  setLimits(leader, kControlReceives + drainedIds);
  controlChannel_ = std::make_unique<ControlChannel>(*this, kControlReceives);
  groupOps_ = std::make_unique<OpPool>(static_cast<size_t>(std::max(properties_.maxRecvs, 1)));
  // Where the provider must never truncate a receive, drains take whole messages and data
  // receives get room after their buffers (one shared scratch area, address space only).
  if (platform::receivesNeedOverflowRoom(provider_)) {
    scratch_ = std::make_unique<ScratchArea>(properties_.maxMessageBytes);
    if (scratch_->empty()) {
      NNF_WARN("%s: no address space for the receives' overflow room; a send larger than its "
               "receive may break the provider's connection to that peer",
               properties_.name.c_str());
      scratch_.reset();
    }
    size_t iovLimit = leader->rx_attr != nullptr ? leader->rx_attr->iov_limit : 0;
    roomForReceives_ = scratch_ != nullptr && iovLimit >= 2;
  } else if (!spec.rdma &&
             platform::truncatedLongReadsUnsafe(platform::familyOf(provider_), fi_version())) {
    // Messages read by the receiver (efa's long-read protocol: above 1 MiB in host memory,
    // above its eager size in GPU memory) must not meet a shorter drain receive there: a
    // registered scratch as large as NCCL's net messages are (512 KiB steps) takes them whole.
    // Host receives get it as room too (a GPU receive cannot: one iov type an operation).
    scratch_ = std::make_unique<ScratchArea>(platform::kLongReadDrainBytes, /*backed=*/true);
    if (scratch_->empty()) scratch_.reset();
    size_t iovLimit = leader->rx_attr != nullptr ? leader->rx_attr->iov_limit : 0;
    roomForReceives_ = scratch_ != nullptr && iovLimit >= 2;
  }
  drains_ = std::make_unique<DrainPool>(*this, drainedIds, scratch_.get());
  // Late messages come within the close bound of their sender's close (10 s without one).
  int64_t closeBoundMs = config.integer(config::Param::kCloseTimeoutMs);
  keeper_ = std::make_unique<ProgressKeeper>(
      *this, static_cast<uint64_t>(closeBoundMs > 0 ? closeBoundMs : 10000) * 1000000);
  memory_ = std::make_unique<MemoryRegistry>(
      *dataRegistrar, domainLock_, memory::MrCacheOptions::fromConfig(config), cuda_,
      properties_.ptrSupport, rmaRead_ ? FI_REMOTE_READ : 0, rail().needsLocalRegistration(),
      spec.rdma ? FI_WRITE | FI_REMOTE_WRITE : 0);
  if (spec.rdma) setUpEager(config);
  if (scratch_ != nullptr && !platform::receivesNeedOverflowRoom(provider_) &&
      rail().needsLocalRegistration()) {
    if (memory_->registerHost(scratch_->data(), scratch_->size(), FI_RECV, &scratchHandle_) !=
        abi::kSuccess) {
      throw std::runtime_error("cannot register the drain receives' scratch area");
    }
    scratch_->setDesc(scratchHandle_->desc);
  }
  if (rmaRead_) {
    // Flush reads land in this word: a read from our own endpoint orders after the receive's
    // data writes, which is what makes them visible to the GPU.
    if (memory_->registerHost(&flushWord_, sizeof(flushWord_), FI_READ, &flushWordHandle_) !=
        abi::kSuccess) {
      throw std::runtime_error("cannot register the GPUDirect flush word");
    }
    const auto& self = rail().address();
    if (peerAddress(self.data(), self.size(), &selfAddress_) != 0) {
      throw std::runtime_error("cannot insert our own address for GPUDirect flushes");
    }
  }
}

void Device::setUpEager(const config::Config& config) {
  const platform::ProviderRules& rules = platform::rulesFor(platform::familyOf(provider_));
  eagerMaxBytes_ = config.userSet(config::Param::kEagerMax)
                       ? static_cast<size_t>(config.integer(config::Param::kEagerMax))
                       : rules.eagerMaxBytes;
  eagerFromGpuMemory_ = rules.writesMixedMemoryIovs;
  if (rules.writesWaitForTarget) {
    // Only inline writes complete while the receiver does not progress (busy elsewhere): the
    // very case eager messages are for. In order, the header may go inline ahead of the message
    // (protocol/rdma_eager.cc), which then takes the whole inject size (4 KiB on shm).
    size_t header = sizeof(protocol::rdma::EagerHeader);
    size_t inlineMax = deliversInOrder_        ? injectLimit_
                       : injectLimit_ > header ? injectLimit_ - header
                                               : 0;
    eagerMaxBytes_ = std::min(eagerMaxBytes_, inlineMax);
  }
  const fi_tx_attr* tx = rail().info()->tx_attr;
  if (eagerMaxBytes_ > 0 && tx != nullptr && tx->rma_iov_limit != 0 && tx->iov_limit < 2) {
    // The header and the message go as one write of two local buffers.
    NNF_INFO(abi::kLogSubsysInit, "%s: no eager messages (the provider writes from one buffer)",
             properties_.name.c_str());
    eagerMaxBytes_ = 0;
  }
  if (eagerMaxBytes_ > 0 && (properties_.ptrSupport & abi::kPtrCuda) != 0 && !rmaRead_) {
    // An eager message for a GPU buffer is copied out of its entry by a read from our own
    // endpoint, which this device cannot do (the flush reads are off too).
    NNF_INFO(abi::kLogSubsysInit,
             "%s: no eager messages (GPU buffers could not be filled from bounce entries)",
             properties_.name.c_str());
    eagerMaxBytes_ = 0;
  }
  if (eagerMaxBytes_ == 0) return;
  // Few areas a chunk: each is 64 entries (about 520 KiB at 8 KiB), and EFA pins what it
  // registers. Remote reads: a GPU buffer's copy out of an entry is a read from our endpoint.
  eagerArena_ = std::make_unique<ControlArena>(
      registrar_.get(), protocol::rdma::bounceBytes(eagerMaxBytes_),
      FI_WRITE | FI_REMOTE_WRITE | (rmaRead_ ? FI_REMOTE_READ : 0), /*slotsPerChunk=*/4);
  NNF_INFO(abi::kLogSubsysInit, "%s: rdma messages up to %zu bytes go eagerly (%u entries a comm)",
           properties_.name.c_str(), eagerMaxBytes_, protocol::rdma::kEagerEntries);
}

void Device::setLimits(const fi_info* leader, size_t ownReceives) {
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
           "%s: provider queues: %zu receives (%zu of them control and drain receives), %zu "
           "sends; more wait in the plugin",
           properties_.name.c_str(), rx_.limit, ownReceives, tx_.limit);
}

void Device::openRails(const DeviceSpec& spec) {
  const fi_info* leader = spec.rails.front();
  const platform::ProviderRules& rules = platform::rulesFor(platform::familyOf(provider_));
  platform::EndpointNeeds needs;
  needs.hmem = (leader->caps & FI_HMEM) != 0;
  needs.readFlush = spec.rmaRead;
  // NCCL's LL128 lines travel as the protocol's data: RMA writes under rdma (eager messages
  // included), tagged messages under sendrecv. Control messages carry none, so each endpoint asks
  // only for the ordering of its protocol's data (libfabric 2.4 and later refuse EFA's
  // message-ordering option outright: asking for it under rdma cost LL128 for nothing).
  needs.rmaWrite = spec.rdma;
  needs.sendRecv = !spec.rdma;
  std::vector<platform::EndpointOption> options = platform::optionsFor(rules, needs);
  std::vector<fabric::EndpointSetting> settings;
  for (const platform::EndpointOption& option : options) {
    settings.push_back({option.level, option.optname, option.value, 0});
  }
  rails_.push_back(std::make_unique<fabric::Rail>(leader, 0, &settings, rules.bindEventQueue));
  // The other rails carry rdma writes only; an option they refuse was refused by the leader
  // too or matters for messages alone, so their answers are not acted on.
  size_t wanted = spec.carryingRails;
  for (size_t r = 1; r < wanted; ++r) {
    std::vector<fabric::EndpointSetting> railSettings = settings;
    rails_.push_back(
        std::make_unique<fabric::Rail>(spec.rails[r], 0, &railSettings, rules.bindEventQueue));
  }
  if (spec.rdma && spec.rails.size() > wanted) {
    NNF_INFO(abi::kLogSubsysInit, "%s: data moves on the first %zu of its %zu NICs",
             properties_.name.c_str(), wanted, spec.rails.size());
  }

  std::vector<platform::OptionResult> results;
  for (size_t i = 0; i < options.size(); ++i) results.push_back({options[i], settings[i].result});
  platform::logOptionResults(properties_.name.c_str(), results);
  platform::OptionVerdict verdict = platform::verdictOf(results);
  if (verdict.hostMemoryOnly && properties_.ptrSupport != abi::kPtrHost) {
    properties_.ptrSupport = abi::kPtrHost;
    NNF_INFO(abi::kLogSubsysInit, "%s: ptrSupport=%d (host memory only)", properties_.name.c_str(),
             properties_.ptrSupport);
  }
  rmaRead_ = spec.rmaRead && !verdict.noReadFlush && !verdict.hostMemoryOnly;
  ll128Ok_ = !rules.unorderedDelivery || !verdict.noLL128;
  deliversInOrder_ = !rules.unorderedDelivery;
}

Device::~Device() {
  keeper_.reset();  // its thread progresses this device: it stops before anything goes
  // Registrations go before the domain, and the uses comms hold of them end first.
  for (auto& entry : comms_) entry.second->releaseRegistrations();
  // Close the endpoint before the comms whose operations it may still reference.
  if (flushWordHandle_ != nullptr) memory_->deregister(flushWordHandle_);
  if (scratchHandle_ != nullptr) memory_->deregister(scratchHandle_);
  controlArena_->deregisterAll();
  if (rdmaArena_) rdmaArena_->deregisterAll();
  if (eagerArena_) eagerArena_->deregisterAll();
  memory_.reset();
  registrar_.reset();
  railSet_.reset();
  railRegistrars_.clear();
  rails_.clear();
  comms_.clear();
  drains_.reset();
  controlChannel_.reset();
}

abi::Result Device::postNow(Operation& op, ssize_t* ret) {
  fabric::Rail& rail = *rails_[op.rail];
  switch (op.type) {
    case OpType::kSend:
      *ret = rail.tsend(op.buffer, op.length, op.desc, op.peer, op.tag, &op.context);
      break;
    case OpType::kRecv:
      if (op.withRoom) {
        *ret = rail.trecvWithRoom(op.buffer, op.length, op.desc, scratch_->data(),
                                  scratch_->size(), scratch_->desc(), op.tag, &op.context);
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

abi::Result Device::postResult(const Operation& op, ssize_t ret) const {
  if (ret == 0) return abi::kSuccess;
  if (ret == -FI_EAGAIN) return abi::kInProgress;
  NNF_WARN("posting a %zu-byte %s on device %d failed: %s", op.length, opTypeName(op.type), index_,
           fabric::errorText(static_cast<int>(ret)).c_str());
  return abi::kSystemError;
}

abi::Result Device::post(Operation& op) {
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

abi::Result Device::inject(const Operation& op) {
  if (!tx_.waiting.empty()) return abi::kInProgress;
  if (op.type == OpType::kWrite) {
    return postResult(op, rails_[op.rail]->injectWritedata(op.buffer, op.length, op.tag, op.peer,
                                                           op.remoteAddress, op.remoteKey));
  }
  return postResult(op, rail().tinject(op.buffer, op.length, op.peer, op.tag));
}

void Device::unqueue(Operation& op) {
  laneOf(op).waiting.remove(op);
}

void Device::retryQueued(Lane& lane) {
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
        noteRailFailure(op->rail, *op, static_cast<int>(-ret), "posting failed");
        op->owner->onError(*op, static_cast<int>(-ret), 0, "posting failed");
      }
    }
    op = next;
  }
  checkWaiting(lane);
}

void Device::checkWaiting(Lane& lane) {
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
      index_, lane.waiting.size(), lane.name,
      static_cast<unsigned long long>(kWaitingWarnNs / 1000000000), lane.name, lane.posted,
      lane.limit);
}

abi::Result Device::progress() {
  keeper_->noteProgress();
  for (size_t r = 0; r < rails_.size(); ++r) {
    abi::Result result = readRail(r);
    if (result != abi::kSuccess) return result;
  }
  if (!rx_.waiting.empty() || rx_.fullSinceNs != 0) retryQueued(rx_);
  if (!tx_.waiting.empty() || tx_.fullSinceNs != 0) retryQueued(tx_);
  if (!closing_.empty()) reapClosed();
  if (--eventCheckCountdown_ == 0) checkEvents();
  return abi::kSuccess;
}

void Device::checkEvents() {
  eventCheckCountdown_ = kEventCheckInterval;
  std::string text;
  for (size_t r = 0; r < rails_.size(); ++r) {
    while (rails_[r]->readEventError(&text)) {
      // The comms to that peer fail through their own operations; this says why, once a rail.
      if (eventReported_.size() < rails_.size()) eventReported_.resize(rails_.size());
      if (eventReported_[r]) continue;
      eventReported_[r] = true;
      NNF_WARN("device %d: NIC %s reported an endpoint error: %s", index_,
               r < railNames_.size() ? railNames_[r].c_str() : "?", text.c_str());
    }
  }
}

abi::Result Device::readRail(size_t index) {
  fabric::Rail& rail = *rails_[index];
  for (;;) {
    ssize_t count = rail.readCompletions(completions_.data(), completions_.size());
    if (count > 0) {
      for (ssize_t i = 0; i < count; ++i) {
        const fi_cq_tagged_entry& entry = completions_[i];
        // A peer's write: remote CQ data without a receive of ours. Its op_context is not ours
        // (NULL, or a provider's value on shm 2.x): never dereference it.
        if ((entry.flags & FI_REMOTE_CQ_DATA) != 0 && (entry.flags & FI_RECV) == 0) {
          if (isRmaImmediate(entry.data)) {
            if (rmaSink_ != nullptr) rmaSink_->onRemoteWrite(*this, index, entry.data, entry.len);
          } else {
            protocol_->onRemoteWrite(*this, index, entry.data, entry.len);
          }
          continue;
        }
        Operation* op = Operation::fromContext(entry.op_context);
        op->inFlight = false;
        --laneOf(*op).posted;
        op->owner->onComplete(*op, completions_[i].len);
      }
      if (static_cast<size_t>(count) < completions_.size()) break;
      continue;
    }
    if (count == -FI_EAGAIN) break;
    if (count == -FI_EAVAIL) {
      dispatchError(index);
      continue;
    }
    NNF_WARN("reading the completion queue of device %d (NIC %s) failed: %s", index_,
             railNames_.size() > index ? railNames_[index].c_str() : "?",
             fabric::errorText(static_cast<int>(count)).c_str());
    return abi::kSystemError;
  }
  return abi::kSuccess;
}

void Device::dispatchError(size_t railIndex) {
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
             railIndex < railNames_.size() ? railNames_[railIndex].c_str() : "?",
             fi_strerror(error), text != nullptr && *text != '\0' ? " (" : "",
             text != nullptr ? text : "", text != nullptr && *text != '\0' ? ")" : "");
    if ((entry.flags & FI_REMOTE_CQ_DATA) != 0 && protocol_->onRemoteWriteError(*this, entry.data, why)) {
      return;
    }
    if (!unattributedErrorReported_) {
      unattributedErrorReported_ = true;
      NNF_WARN("device %d: an error completion names no operation and no comm: %s", index_, why);
    }
    return;
  }
  Operation* op = Operation::fromContext(entry.op_context);
  op->inFlight = false;
  --laneOf(*op).posted;
  // shm in libfabric 1.17 reports a truncation as -FI_ETRUNC: errors are positive elsewhere.
  int error = entry.err < 0 ? -entry.err : entry.err;
  noteRailFailure(railIndex, *op, error, text);
  op->owner->onError(*op, error, entry.olen, text);
}

void Device::noteRailFailure(size_t railIndex, const Operation& op, int error, const char* text) {
  // Our own cancellations (closes) and a single-rail device's failures say nothing new.
  if (rails_.size() < 2 || error == FI_ECANCELED) return;
  if (railFailureReported_.size() < rails_.size()) railFailureReported_.resize(rails_.size());
  if (railFailureReported_[railIndex]) return;
  railFailureReported_[railIndex] = true;
  bool detail = text != nullptr && *text != '\0' && strcmp(text, fi_strerror(error)) != 0;
  NNF_WARN(
      "device %d: rail %zu (NIC %s) failed a %zu-byte %s: %s%s%s%s; later failures on this rail "
      "are reported by their comms only",
      index_, railIndex, railIndex < railNames_.size() ? railNames_[railIndex].c_str() : "?",
      op.length, opTypeName(op.type), fi_strerror(error), detail ? " (" : "", detail ? text : "",
      detail ? ")" : "");
}

bool Device::startControl() {
  if (controlStarted_) return true;
  controlStarted_ = controlChannel_->start();
  return controlStarted_;
}

uint32_t Device::allocateId() {
  // Ids are handed out round-robin so that a recently closed comm's id is not reused while a
  // late message for it may still be on the wire.
  for (uint32_t tries = 0; tries < tags::kMaxCommId; ++tries) {
    uint32_t id = nextId_;
    nextId_ = nextId_ == tags::kMaxCommId ? 1 : nextId_ + 1;
    if (comms_.find(id) != comms_.end()) continue;
    drains_->remove(id);
    return id;
  }
  NNF_WARN("device %d has no free comm id (%u comms open)", index_, tags::kMaxCommId);
  return 0;
}

Comm* Device::findComm(uint32_t id) {
  // Completions come in runs for one comm: the last one found answers most lookups.
  if (lastFound_ != nullptr && lastFound_->id() == id) return lastFound_;
  auto it = comms_.find(id);
  if (it == comms_.end()) return nullptr;
  lastFound_ = it->second.get();
  return lastFound_;
}

void Device::closeComm(Comm& comm, bool hold) {
  comm.close();
  comm.setHeld(hold);
  drains_->add(comm.id());
  keeper_->wake();
  if (!hold && comm.inFlight() == 0) {
    destroyComm(comm);
  } else {
    closing_.push_back(&comm);
  }
}

void Device::releaseClosed(Comm& comm) {
  comm.setHeld(false);
  if (comm.inFlight() == 0) destroyComm(comm);
}

void Device::destroyComm(Comm& comm) {
  closing_.erase(std::remove(closing_.begin(), closing_.end(), &comm), closing_.end());
  if (lastFound_ == &comm) lastFound_ = nullptr;
  comms_.erase(comm.id());
}

void Device::reapClosed() {
  // A few comms a call, round-robin: thousands closing at once (each waiting for its last
  // control message) must not make every progress call scan them all.
  constexpr size_t kReapPerCall = 64;
  for (size_t checked = 0; checked < kReapPerCall && !closing_.empty(); ++checked) {
    if (reapCursor_ >= closing_.size()) reapCursor_ = 0;
    Comm* comm = closing_[reapCursor_];
    if (!comm->held() && comm->inFlight() == 0) {
      destroyComm(*comm);  // removes it from closing_: the cursor now names the next one
    } else {
      ++reapCursor_;
    }
  }
}

int Device::peerAddress(const uint8_t* address, size_t length, fi_addr_t* out, size_t rail) {
  std::pair<size_t, std::vector<uint8_t>> key(rail,
                                              std::vector<uint8_t>(address, address + length));
  auto it = peers_.find(key);
  if (it != peers_.end()) {
    *out = it->second;
    return 0;
  }
  fi_addr_t addr;
  int ret = rails_[rail]->insertAddress(address, length, &addr);
  if (ret != 0) return ret;
  peers_.emplace(std::move(key), addr);
  *out = addr;
  return 0;
}

}  // namespace nnf::core
