#include "core/device.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/tags.h"
#include "log/log.h"
#include "platform/provider_rules.h"

namespace nnf::core {
namespace {
// Closed comm ids whose late messages are drained (one posted receive each).
constexpr size_t kDrainedIds = 256;
// Receives of the control channel, shared by every comm of the device.
constexpr size_t kControlReceives = 64;

// How many closed comm ids get a drain on `provider` (device `name`).
size_t drainedIdsFor(const std::string& provider, const std::string& name) {
  if (platform::wildcardReceivesSafe(platform::familyOf(provider), fi_version())) {
    return kDrainedIds;
  }
  NNF_INFO(abi::kLogSubsysInit,
           "%s: late messages of closed comms are not drained (shm before libfabric 2.0 "
           "mismatches messages after a wildcard receive); they stay with the provider",
           name.c_str());
  return 0;
}
}  // namespace

wire::RailAddresses Device::ownRailAddresses() const {
  const uint8_t* addresses[wire::kMaxRails - 1];
  size_t length = railCount_ > 1 ? rail(1).address().size() : 0;
  for (size_t r = 1; r < railCount_; ++r) {
    const auto& address = rail(r).address();
    if (address.size() != length || length > wire::kMaxRailAddressLength) {
      return wire::makeRailAddresses(1, nullptr, 0);
    }
    addresses[r - 1] = address.data();
  }
  return wire::makeRailAddresses(railCount_, addresses, length);
}

Device::Device(int index, const DeviceSpec& spec, std::unique_ptr<DeviceRails> rails,
               const config::Config& config, const protocol::ProtocolFactory& protocols)
    : index_(index),
      config_(config),
      rails_(std::move(rails)),
      engine_(&rails_->engine()),
      railCount_(rails_->railCount()),
      railHealth_(railCount_,
                  static_cast<uint64_t>(config.integer(config::Param::kRailProbeMs)) * 1000000),
      paths_(static_cast<uint64_t>(config.integer(config::Param::kRailProbeMs)) * 1000000),
      silenceBoundNs_(static_cast<uint64_t>(config.integer(config::Param::kRailTimeoutMs)) *
                      1000000),
      provider_(rails_->rail(0).info()->fabric_attr->prov_name),
      properties_(spec.properties),
      railNames_(spec.railNames),
      gpus_(spec.gpus) {
  fullSpeedMbps_ = properties_.speedMbps;
  adoptRailVerdict(spec);
  protocol_ = protocols.create(*this, spec, *this);

  cuda_ = spec.cuda;
  flushSetting_ = memory::flushSettingFromConfig(config);
  // On every rail: control messages go on any rail up when the leader fails.
  controlArena_ = std::make_unique<ControlArena>(
      rail().needsLocalRegistration() ? &everyRailRegistrar() : nullptr);
  railAddresses_ = ownRailAddresses();
  // The control ring and the drains are posted receives too: they count in the receive lane.
  size_t drainedIds = drainedIdsFor(provider_, properties_.name);
  controlChannel_ = std::make_unique<ControlChannel>(*this, kControlReceives);
  groupOps_ = std::make_unique<OpPool>(static_cast<size_t>(std::max(properties_.maxRecvs, 1)));
  prepareScratch(spec);
  engine_->setReceiveRoom(scratch_.get());
  drains_ = std::make_unique<DrainPool>(*this, drainedIds, scratch_.get());
  // Late messages come within the close bound of their sender's close (10 s without one).
  int64_t closeBoundMs = config.integer(config::Param::kCloseTimeoutMs);
  keeper_ = std::make_unique<ProgressKeeper>(
      *this, static_cast<uint64_t>(closeBoundMs > 0 ? closeBoundMs : 10000) * 1000000);
  memory_ = std::make_unique<MemoryRegistry>(
      rails_->dataRegistrar(), domainLock(), memory::MrCacheOptions::fromConfig(config), cuda_,
      properties_.ptrSupport, rmaRead_ ? FI_REMOTE_READ : 0, rail().needsLocalRegistration(),
      spec.rdma ? FI_WRITE | FI_REMOTE_WRITE : 0);
  protocol_->startDevice(*this);
  registerHostBuffers();
}

void Device::adoptRailVerdict(const DeviceSpec& spec) {
  const fi_info* leader = rails_->rail(0).info();
  localOnly_ = provider_ == "shm" ||
               ((leader->caps & FI_LOCAL_COMM) != 0 && (leader->caps & FI_REMOTE_COMM) == 0);
  RailVerdict verdict = rails_->verdict();
  if (verdict.hostMemoryOnly && properties_.ptrSupport != abi::kPtrHost) {
    properties_.ptrSupport = abi::kPtrHost;
    NNF_INFO(abi::kLogSubsysInit, "%s: ptrSupport=%d (host memory only)", properties_.name.c_str(),
             properties_.ptrSupport);
  }
  rmaRead_ = spec.rmaRead && !verdict.noReadFlush && !verdict.hostMemoryOnly;
  ll128Ok_ = verdict.ll128Ok;
  injectLimit_ = engine_->injectLimit();
  deliversInOrder_ = engine_->deliversInOrder();
}

void Device::prepareScratch(const DeviceSpec& spec) {
  const fi_info* leader = rails_->rail(0).info();
  // Where the provider must never truncate a receive, drains take whole messages and data
  // receives get room after their buffers (one shared scratch area, address space only).
  if (platform::receivesNeedOverflowRoom(provider_)) {
    scratch_ = std::make_unique<ScratchArea>(properties_.maxMessageBytes);
    if (scratch_->empty()) {
      NNF_WARN(
          "%s: no address space for the receives' overflow room; a send larger than its "
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
}

void Device::registerHostBuffers() {
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
    // On every rail: a flush goes on the first one up.
    for (size_t r = 0; r < railCount_; ++r) {
      const auto& self = rail(r).address();
      if (peerAddress(self.data(), self.size(), &selfAddresses_[r], r) != 0) {
        throw std::runtime_error("cannot insert our own address for GPUDirect flushes");
      }
    }
  }
  if (railCount_ > 1 && railHealth_.probes()) {
    bool reads = true;
    for (size_t r = 0; r < railCount_; ++r) reads &= (rail(r).info()->caps & FI_READ) != 0;
    if (reads) {
      railProbe_ = std::make_unique<RailProbe>(*this);
      pathProbe_ = std::make_unique<PathProbe>(*this);
    } else {
      NNF_INFO(abi::kLogSubsysInit,
               "%s: a rail that fails stays down: its provider offers no RMA read to probe it",
               properties_.name.c_str());
    }
  }
}

void Device::limitMessageBytes(size_t bytes) {
  properties_.maxMessageBytes = std::min(properties_.maxMessageBytes, bytes);
}

Device::~Device() {
  keeper_.reset();  // its thread progresses this device: it stops before anything goes
  // Registrations go before the domain, and the uses comms hold of them end first.
  for (auto& entry : comms_) entry.second->releaseRegistrations();
  // Close the endpoint before the comms whose operations it may still reference.
  if (flushWordHandle_ != nullptr) memory_->deregister(flushWordHandle_);
  if (railProbe_ != nullptr) railProbe_->deregister();
  if (scratchHandle_ != nullptr) memory_->deregister(scratchHandle_);
  controlArena_->deregisterAll();
  protocol_->releaseDevice();
  memory_.reset();
  rails_->close();
  comms_.clear();
  drains_.reset();
  controlChannel_.reset();
}

void Device::onRemoteWrite(size_t rail, uint64_t data, size_t length) {
  if (isRmaImmediate(data)) {
    if (rmaSink_ != nullptr) rmaSink_->onRemoteWrite(*this, rail, data, length);
    return;
  }
  protocol_->onRemoteWrite(*this, rail, data, length);
}

bool Device::onRemoteWriteError(uint64_t data, const char* why) {
  return protocol_->onRemoteWriteError(*this, data, why);
}

const char* Device::railName(size_t rail) const {
  return rail < railNames_.size() ? railNames_[rail].c_str() : "?";
}

void Device::onTransferError(size_t rail, const Operation& op, int error, const char* text) {
  // Our own cancellations (closes) and a single-rail device's failures say nothing new: its
  // comms report them. A probe's failure is its answer (onProbeEnded).
  if (railCount_ < 2 || error == FI_ECANCELED || rail >= railCount_) return;
  if (railProbe_ != nullptr && railProbe_->owns(op)) return;
  if (pathProbe_ != nullptr && pathProbe_->owns(op)) return;
  bool detail = text != nullptr && *text != '\0' && strcmp(text, fi_strerror(error)) != 0;
  if (RailHealth::isPathFailure(error)) {
    char what[320];
    snprintf(what, sizeof(what), "failed a %zu-byte %s: %s%s%s%s", op.length, opTypeName(op.type),
             fi_strerror(error), detail ? " (" : "", detail ? text : "", detail ? ")" : "");
    pathBroke(rail, op.peer, what);
    return;
  }
  if ((railErrorsReported_ & (1u << rail)) != 0) return;
  railErrorsReported_ |= 1u << rail;
  NNF_WARN(
      "device %d: rail %zu (NIC %s) failed a %zu-byte %s: %s%s%s%s; later failures on this rail "
      "are reported by their comms only",
      index_, rail, railName(rail), op.length, opTypeName(op.type), fi_strerror(error),
      detail ? " (" : "", detail ? text : "", detail ? ")" : "");
}

void Device::railPathBroke(size_t rail, const char* what) {
  if (!railHealth_.markDown(rail, nowNs())) return;  // down already: its first failure told
  railErrorsReported_ |= 1u << rail;
  // The paths it broke were our NIC's: the rail stands for them now.
  paths_.forgetRail(rail);
  refreshPathMasks();
  size_t carrying = railHealth_.upCount();
  // NCCL reads the speed when it builds a communicator: later ones see the rails left.
  properties_.speedMbps = speedWith(carrying);
  // The keeper probes the rail from now on, whether or not the application calls.
  if (railProbe_ != nullptr && keeper_ != nullptr) keeper_->wake();
  if (railHealth_.failures(rail) == 1) {
    NNF_WARN(
        "device %d: rail %zu (NIC %s) %s; its path is broken: this device moves data on %zu of "
        "%zu rails from now on, and what was in flight on it goes again on the others (rdma)%s",
        index_, rail, railName(rail), what, carrying, railCount_,
        railProbe_ != nullptr ? "; it is probed and rejoins when it works again" : "");
  } else {
    NNF_INFO(abi::kLogSubsysNet,
             "device %d: rail %zu (NIC %s) failed again (%u times now): %s; %zu of %zu rails "
             "carry data",
             index_, rail, railName(rail), railHealth_.failures(rail), what, carrying, railCount_);
  }
}

int Device::speedWith(size_t rails) const {
  return static_cast<int>(int64_t{fullSpeedMbps_} * static_cast<int64_t>(rails) /
                          static_cast<int64_t>(railCount_));
}

uint64_t Device::probeRails() {
  uint64_t now = nowNs();
  uint64_t wait = std::min({releaseStrandedWhenDue(now), probePaths(now), lookForSilentPaths(now)});
  // A read asking whether our NIC or a path broke is in flight: its answer is read soon.
  if (classifying_ != 0) wait = 0;
  if (railProbe_ == nullptr || railHealth_.allUp()) return wait;
  // A rail whose probe's operation asks about a path (classifying_) is probed after it.
  for (int rail = railHealth_.takeDueProbe(now, classifying_); rail >= 0;
       rail = railHealth_.takeDueProbe(now, classifying_)) {
    if (!railProbe_->post(static_cast<size_t>(rail))) {
      railHealth_.probeFailed(static_cast<size_t>(rail), now);
    }
  }
  return std::min(railHealth_.nextProbeInNs(now), wait);
}

void Device::onProbeEnded(size_t rail, int error, const char* text) {
  if ((classifying_ & (1u << rail)) != 0) {
    onClassified(rail, error);
    return;
  }
  if (error != 0) {
    NNF_TRACE("device %d: rail %zu (NIC %s) probe failed: %s (%s)", index_, rail, railName(rail),
              fi_strerror(error), text != nullptr ? text : "");
    railHealth_.probeFailed(rail, nowNs());
    return;
  }
  railHealth_.probeSucceeded(rail, nowNs());
  paths_.forgetRail(rail);  // broken with the rail, or not at all: asked again if still broken
  refreshPathMasks();
  size_t carrying = railHealth_.upCount();
  properties_.speedMbps = speedWith(carrying);
  NNF_INFO(abi::kLogSubsysNet,
           "device %d: rail %zu (NIC %s) works again (a read through it succeeded): it carries "
           "new messages from now on; %zu of %zu rails carry data",
           index_, rail, railName(rail), carrying, railCount_);
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
  int ret = rails_->insertAddress(rail, address, length, &addr);
  if (ret != 0) return ret;
  peers_.emplace(std::move(key), addr);
  *out = addr;
  return 0;
}

}  // namespace nnf::core
