// A group's life: connect (every rank joins every rank), symmetric windows, contexts, close.
// The collective calls block: they post their messages, then progress the device (lock taken
// per pass, so that NCCL's net proxy threads on the same device are not held up) until every
// rank has answered, a rank on this host is found dead, or NCCL_FABRIC_RMA_SETUP_TIMEOUT_MS.
#include <rdma/fi_errno.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <thread>

#include "core/clock.h"
#include "core/device.h"
#include "core/wire.h"
#include "log/log.h"
#include "rma/engine.h"
#include "rma/group.h"
#include "rma/listener.h"

namespace nnf::rma {
namespace {

// GPU signal words a group updates at once (rma/signal_words.h).
constexpr uint32_t kWordCapacity = 1024;
constexpr uint64_t kSetUpCheckNs = 100 * 1000000ull;  // dead-rank checks while setting up
constexpr uint64_t kRmaAccess = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

using Lock = std::lock_guard<fabric::DomainLock>;

}  // namespace

Group::Group(core::Device& device, uint32_t id, Engine& engine, uint32_t rank, uint32_t nranks)
    : Comm(device, Kind::kRma, id),
      engine_(engine),
      rank_(rank),
      nranks_(nranks),
      session_(device.nextNonce() | 1u),
      peers_(new Peer[nranks]) {
  ref_.kind = HandleKind::kGroup;
  ref_.object = this;
  rails_ = device.railCount();
  injectLimit_ = device.injectLimit();
  stripeMin_ = device.stripeMinBytes();
  // One completion per segment at the target: no segment larger than a rail writes whole (EFA
  // cuts writes above 1 GiB into pieces that each raise a completion).
  segmentMax_ = uint64_t{1} << 30;
  for (size_t r = 0; r < rails_; ++r) {
    const fi_ep_attr* ep = device.rail(r).info()->ep_attr;
    if (ep != nullptr && ep->max_msg_size > 0) segmentMax_ = std::min<uint64_t>(segmentMax_, ep->max_msg_size);
  }
  blockedPeers_.reserve(nranks);
  retrying_.reserve(nranks);
  peerCheckNs_ =
      static_cast<uint64_t>(device.config().integer(config::Param::kPeerCheckMs)) * 1000000;
  for (uint32_t p = 0; p < nranks_; ++p) {
    Peer& peer = peers_[p];
    peer.in.init(this, p);
    for (PeerOp* op : {&peer.message, &peer.credit}) {
      op->op.owner = this;
      op->peer = p;
    }
    peer.message.op.index = kRoleMessage;
    peer.credit.op.index = kRoleCredit;
  }
}

Group::~Group() {
  ref_.magic = HandleRef::kMagicDead;
  for (uint32_t p = 0; p < nranks_; ++p) device().controlArena().release(&peers_[p].slot);
  for (auto& window : windows_) window->ref.magic = HandleRef::kMagicDead;
  // Registered still (the close gave up on operations that never came back): the provider may
  // write into it, so the memory stays, set aside for good.
  if (ringMh_ == nullptr) std::free(ring_);
}

bool Group::allocateRing() {
  wordsOffset_ = 2 * size_t{nranks_} * kRingBytes;
  flushOffset_ = wordsOffset_ + size_t{kWordCapacity} * sizeof(uint64_t);
  ringBytes_ = (flushOffset_ + sizeof(uint64_t) + 4095) & ~size_t{4095};
  ring_ = static_cast<uint8_t*>(std::aligned_alloc(4096, ringBytes_));
  if (ring_ == nullptr) {
    NNF_WARN("RMA connect: no memory for the %zu-byte ring area of a group of %u ranks",
             ringBytes_, nranks_);
    return false;
  }
  memset(ring_, 0, ringBytes_);
  // Peers write entries and credits into it, the NIC reads and writes its host words.
  if (device().memory().registerHost(ring_, ringBytes_, FI_SEND | FI_RECV | kRmaAccess,
                                     &ringMh_) != abi::kSuccess) {
    NNF_WARN("RMA connect: cannot register the %zu-byte ring area", ringBytes_);
    ringMh_ = nullptr;
    return false;
  }
  words_.reset(new SignalWords(static_cast<SignalWords::Io&>(*this), kWordCapacity));
  wordOps_.reset(new WordOp[kWordCapacity]);
  for (uint32_t i = 0; i < kWordCapacity; ++i) {
    wordOps_[i].op.owner = this;
    wordOps_[i].op.index = kRoleWord;
    wordOps_[i].index = i;
  }
  return true;
}

abi::Result Group::connect(Listener& listener, const std::vector<ListenHandle>& handles) {
  core::Device& dev = device();
  {
    Lock lock(dev.domainLock());
    if (!engine_.allocateLinks(nranks_, this, &linkBase_)) {
      NNF_WARN("RMA connect: device %d has no %u free link ids left (%u per device)", dev.index(),
               nranks_, kMaxLinks - 1);
      return abi::kSystemError;
    }
    linksHeld_ = true;
    for (uint32_t p = 0; p < nranks_; ++p) {
      if (!dev.controlArena().acquire(&peers_[p].slot)) return abi::kSystemError;  // logged
      const ListenHandle& handle = handles[p];
      if (dev.peerAddress(handle.address, handle.addressLength, &peers_[p].addr[0]) != 0) {
        NNF_WARN("RMA connect: the address of rank %u's handle is refused by the provider", p);
        return abi::kInvalidUsage;
      }
    }
  }
  if (!allocateRing()) return abi::kSystemError;
  {
    Lock lock(dev.domainLock());
    listener_ = &listener;
    listener.attach(this);
    JoinMessage join{};
    join.magic = JoinMessage::kMagic;
    join.version = kVersion;
    join.kind = static_cast<uint32_t>(MessageKind::kJoin);
    join.rank = rank_;
    join.nranks = nranks_;
    join.groupId = id();
    join.session = session_;
    join.linkBase = linkBase_;
    join.pid = core::wire::localPid();
    join.hostId = core::wire::localHostId();
    join.ringAddress = ringMh_->remoteAddress(ring_);
    join.ringKey = ringMh_->key();
    join.rails = static_cast<uint16_t>(rails_);
    for (size_t r = 1; r < rails_; ++r) {
      const std::vector<uint8_t>& address = dev.rail(r).address();
      if (address.size() > kMaxRailAddress) {
        NNF_WARN("RMA connect: rail %zu's address of %zu bytes exceeds %zu", r, address.size(),
                 kMaxRailAddress);
        return abi::kSystemError;
      }
      join.railAddressLength = static_cast<uint16_t>(address.size());
      memcpy(join.railAddresses[r - 1], address.data(), address.size());
    }
    // Every rank, this one too: the message to ourselves is also the handshake with our own
    // endpoint that EFA needs before a write to it (self puts, GPU signal words, flushes).
    for (uint32_t p = 0; p < nranks_; ++p) {
      join.listenerId = handles[p].listenerId;
      join.listenerNonce = handles[p].nonce;
      abi::Result result = sendMessage(p, handles[p].listenerId, &join, sizeof(join));
      if (result != abi::kSuccess) return result;
    }
  }
  if (!exchange("connect", Phase::kJoins)) return abi::kRemoteError;
  connected_ = true;
  return abi::kSuccess;
}

void Group::onJoin(const JoinMessage& join) {
  if (join.nranks != nranks_ || join.rank >= nranks_) {
    NNF_WARN("RMA connect: a join from rank %u of %u ranks, but this group has %u", join.rank,
             join.nranks, nranks_);
    noteError();
    return;
  }
  Peer& peer = peers_[join.rank];
  if (peer.joined) return;  // a duplicate (the provider delivered it twice)
  peer.groupId = join.groupId;
  peer.session = join.session;
  peer.linkBase = join.linkBase;
  peer.pid = join.pid;
  peer.local = join.hostId == core::wire::localHostId() && join.pid != 0;
  peer.ringAddress = join.ringAddress;
  peer.ringKey = join.ringKey;
  // Rail r talks to the peer's rail r (a key is good on its own NIC only).
  size_t rails = join.rank == rank_ ? 1 : std::min<size_t>(rails_, join.rails);
  for (size_t r = 1; r < rails; ++r) {
    if (device().peerAddress(join.railAddresses[r - 1], join.railAddressLength, &peer.addr[r],
                             r) != 0) {
      NNF_WARN("RMA connect: rank %u's rail %zu address is refused; its data takes %zu rail(s)",
               join.rank, r, r);
      rails = r;
      break;
    }
  }
  peer.rails = rails;
  peer.joined = true;
}

uint32_t Group::firstMissing(Phase phase) const {
  for (uint32_t p = 0; p < nranks_; ++p) {
    const Peer& peer = peers_[p];
    if (peer.dead) continue;
    if (phase == Phase::kJoins ? !peer.joined : !windows_[recordsWanted_]->remote[p].present)
      return p;
  }
  return nranks_;
}

abi::Result Group::sendMessage(uint32_t peer, uint32_t remoteId, const void* payload,
                               size_t length) {
  Peer& p = peers_[peer];
  p.messageFailed = false;
  abi::Result result =
      device().controlChannel().send(p.message.op, p.slot.data, p.slot.desc, p.addr[0], remoteId,
                                     core::wire::ControlKind::kRma, payload, length);
  if (result != abi::kSuccess) {
    NNF_WARN("RMA: cannot send a set-up message to rank %u", peer);
    return result;
  }
  ++opsOut_;
  return abi::kSuccess;
}

bool Group::exchange(const char* what, Phase phase) {
  core::Device& dev = device();
  int64_t timeoutMs = dev.config().integer(config::Param::kRmaSetupTimeoutMs);
  uint64_t start = core::nowNs();
  uint64_t deadline = timeoutMs > 0 ? start + static_cast<uint64_t>(timeoutMs) * 1000000 : 0;
  for (uint64_t spins = 0;; ++spins) {
    uint64_t now = core::nowNs();
    {
      Lock lock(dev.domainLock());
      if (dev.progress() != abi::kSuccess) return false;  // logged
      bool sent = true;
      for (uint32_t p = 0; p < nranks_; ++p) {
        const Peer& peer = peers_[p];
        if (peer.messageFailed) {
          NNF_WARN("RMA %s: the set-up message to rank %u failed", what, p);
          noteError();
          return false;
        }
        if (peer.message.op.inFlight || peer.message.op.queued) sent = false;
      }
      if (sent && firstMissing(phase) == nranks_) {
        for (uint32_t p = 0; p < nranks_; ++p) {
          if (peers_[p].dead) {
            NNF_WARN("RMA %s: rank %u is gone", what, p);
            return false;
          }
        }
        return true;
      }
      if (now - lastCheckNs_ > kSetUpCheckNs) {
        lastCheckNs_ = now;
        checkPeers(now, true);
      }
      if (deadline != 0 && now > deadline) {
        NNF_WARN("RMA %s: rank %u did not answer within %lld ms "
                 "(NCCL_FABRIC_RMA_SETUP_TIMEOUT_MS)",
                 what, firstMissing(phase), static_cast<long long>(timeoutMs));
        noteError();
        return false;
      }
    }
    // Other ranks may share these cores: waiting here must leave them the CPU.
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void Group::checkPeers(uint64_t now, bool waitingForSetUp) {
  for (uint32_t p = 0; p < nranks_; ++p) {
    Peer& peer = peers_[p];
    if (!peer.local || peer.dead || p == rank_) continue;
    if (!waitingForSetUp && peer.outstanding == 0) continue;
    if (kill(static_cast<pid_t>(peer.pid), 0) == 0 || errno != ESRCH) continue;
    char why[64];
    snprintf(why, sizeof(why), "process %u has exited", peer.pid);
    markDead(p, why);
  }
}

void Group::markDead(uint32_t peer, const char* why) {
  Peer& p = peers_[peer];
  if (p.dead) return;
  p.dead = true;
  noteError();
  NNF_WARN("RMA group %u: rank %u (%s); its operations fail with ncclRemoteError", id(), peer,
           why);
  // Waiting signaled puts never started: they fail now. Started ones fail too; what the
  // provider still holds of them comes back (or not) on its own.
  while (Request* request = p.waitHead) {
    p.waitHead = request->nextWaiting;
    request->nextWaiting = nullptr;
    request->state = Request::State::kActive;
    fail(*request, abi::kRemoteError);
  }
  p.waitTail = nullptr;
  for (auto& context : contexts_) {
    context->forEach([&](Request& request) {
      if (request.peer == peer && request.state == Request::State::kActive)
        fail(request, abi::kRemoteError);
    });
  }
}

bool Group::peerGone() {
  for (uint32_t p = 0; p < nranks_; ++p) {
    if (peers_[p].outstanding > 0 && !peers_[p].dead) return false;
  }
  return true;
}

void Group::onControlMessage(core::wire::ControlKind kind, const uint8_t* data, size_t length) {
  WindowMessage record;
  std::string reason;
  MessageKind messageKind;
  if (kind != core::wire::ControlKind::kRma || !rma::messageKind(data, length, &messageKind) ||
      messageKind != MessageKind::kWindow) {
    return;
  }
  if (!decodeWindow(data, length, &record, &reason) || record.session != session_ ||
      record.rank >= nranks_) {
    NNF_WARN("RMA group %u: dropped a window record: %s", id(),
             reason.empty() ? "it belongs to another group" : reason.c_str());
    return;
  }
  storeRecord(record);
}

void Group::storeRecord(const WindowMessage& record) {
  if (record.index >= windows_.size()) {
    records_.push_back(record);  // ours comes with our own regMrSym
    return;
  }
  Window& window = *windows_[record.index];
  if (!window.alive) return;
  RemoteWindow& remote = window.remote[record.rank];
  remote.address = record.address;
  remote.size = record.size;
  for (size_t r = 0; r < memory::kMaxRails; ++r) remote.keys[r] = record.keys[r];
  remote.host = record.hostMemory != 0;
  remote.present = true;
}

abi::Result Group::registerWindow(void* data, size_t size, int type, uint64_t dmabufOffset,
                                  int fd, uint64_t flags, Window** out) {
  core::Device& dev = device();
  auto window = std::make_unique<Window>();
  window->ref.kind = HandleKind::kWindow;
  window->ref.object = window.get();
  window->group = this;
  window->base = static_cast<uint8_t*>(data);
  window->size = size;
  window->host = type == abi::kPtrHost;
  window->neverReset = (flags & kMrFlagSignalNeverReset) != 0;
  window->remote.resize(nranks_);
  if (size > 0) {
    // Through the device's MR cache, like NCCL's net buffers: one registration serves both.
    abi::Result result =
        dev.memory().registerBuffer(data, size, type, fd, dmabufOffset, &window->mh, kRmaAccess);
    if (result != abi::kSuccess) return result;  // logged
  }
  WindowMessage record{};
  {
    Lock lock(dev.domainLock());
    window->index = static_cast<uint32_t>(windows_.size());
    record.magic = WindowMessage::kMagic;
    record.version = kVersion;
    record.hostMemory = window->host ? 1 : 0;
    record.kind = static_cast<uint32_t>(MessageKind::kWindow);
    record.rank = rank_;
    record.index = window->index;
    record.size = size;
    if (window->mh != nullptr) {
      record.address = window->mh->remoteAddress(data);
      for (size_t r = 0; r < memory::kMaxRails; ++r) record.keys[r] = window->mh->key(r);
    }
    windows_.push_back(std::move(window));
    Window& added = *windows_.back();
    storeRecord(record);  // our own
    for (auto it = records_.begin(); it != records_.end();) {
      if (it->index == added.index) {
        storeRecord(*it);
        it = records_.erase(it);
      } else {
        ++it;
      }
    }
    recordsWanted_ = added.index;
    for (uint32_t p = 0; p < nranks_; ++p) {
      if (p == rank_ || peers_[p].dead) continue;
      record.session = peers_[p].session;
      abi::Result result = sendMessage(p, peers_[p].groupId, &record, sizeof(record));
      if (result != abi::kSuccess) return result;
    }
    *out = &added;
  }
  if (!exchange("regMrSym", Phase::kWindow)) {
    deregisterWindow(**out);
    *out = nullptr;
    return abi::kRemoteError;
  }
  return abi::kSuccess;
}

abi::Result Group::deregisterWindow(Window& window) {
  core::MemoryHandle* mh = window.mh;
  bool deferMr = false;
  {
    Lock lock(device().domainLock());
    window.alive = false;
    window.ref.magic = HandleRef::kMagicDead;
    if (words_) words_->forgetWindow(window.index);
    if (mh != nullptr) {
      // Operations still using it keep the key and descriptor valid until they end.
      mh->released = true;
      deferMr = mh->activeUses > 0;
      mh->mrOwed = deferMr;
    }
    window.mh = nullptr;
  }
  if (mh == nullptr) return abi::kSuccess;
  core::MemoryRegistry* registry = mh->registry;
  abi::Result result = registry->deregister(mh, deferMr, deferMr);
  registry->releaseOwed();
  return result;
}

abi::Result Group::createContext(int streams, Context** out) {
  Lock lock(device().domainLock());
  contexts_.push_back(std::make_unique<Context>(*this, streams));
  *out = contexts_.back().get();
  return abi::kSuccess;
}

abi::Result Group::destroyContext(Context& context) {
  Lock lock(device().domainLock());
  // Its requests and their operations stay with the group: the provider may still hold some.
  context.kill();
  return abi::kSuccess;
}

void Group::cancelInFlight() {
  ref_.magic = HandleRef::kMagicDead;
  auto unqueue = [this](core::Operation& op) {
    if (!op.queued) return false;
    device().unqueue(op);
    --opsOut_;
    return true;
  };
  for (uint32_t p = 0; p < nranks_; ++p) {
    unqueue(peers_[p].message.op);
    unqueue(peers_[p].credit.op);
  }
  if (wordOps_) {
    for (uint32_t i = 0; i < words_->capacity(); ++i) unqueue(wordOps_[i].op);
  }
  for (auto& context : contexts_) {
    context->forEach([&](Request& request) {
      for (OpSlot& slot : request.ops) {
        if (!unqueue(slot.op)) continue;
        if (slot.op.index != kRoleEntry) --callerOps_;
        --request.pending;
      }
    });
  }
}

abi::Result Group::close() {
  core::Device& dev = device();
  int64_t boundMs = dev.config().integer(config::Param::kCloseTimeoutMs);
  {
    Lock lock(dev.domainLock());
    closing_ = true;
    ref_.magic = HandleRef::kMagicDead;
    if (linksHeld_) engine_.releaseLinks(linkBase_, nranks_);  // nothing lands here any more
    linksHeld_ = false;
    if (listener_ != nullptr) listener_->detach();
    listener_ = nullptr;
    for (uint32_t p = 0; p < nranks_; ++p) {
      Peer& peer = peers_[p];
      while (Request* request = peer.waitHead) {
        peer.waitHead = request->nextWaiting;
        request->nextWaiting = nullptr;
        request->state = Request::State::kActive;
        fail(*request, abi::kRemoteError);
      }
      peer.waitTail = nullptr;
    }
  }
  // NCCL may free its buffers once this returns: wait for what reads or writes them.
  abi::Result result = abi::kSuccess;
  uint64_t lastMoveNs = core::nowNs();
  int lastCount = -1;
  for (;;) {
    uint64_t now = core::nowNs();
    {
      Lock lock(dev.domainLock());
      dev.progress();
      checkPeers(now, false);
      if (callerOps_ == 0 || peerGone()) break;
      if (callerOps_ != lastCount) {
        lastCount = callerOps_;
        lastMoveNs = now;
      }
      if (boundMs > 0 && now - lastMoveNs > static_cast<uint64_t>(boundMs) * 1000000) {
        NNF_WARN("RMA closeColl: %d operation(s) on registered windows still with the provider "
                 "after %lld ms (NCCL_FABRIC_CLOSE_TIMEOUT_MS); the peers are alive but take "
                 "nothing",
                 callerOps_, static_cast<long long>(boundMs));
        result = abi::kRemoteError;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  // After this the provider refuses any peer's access to the windows.
  for (auto& window : windows_) {
    if (window->alive) deregisterWindow(*window);
  }
  bool idle = false;
  {
    Lock lock(dev.domainLock());
    dev.progress();
    idle = opsOut_ == 0;
  }
  if (idle && ringMh_ != nullptr) {
    core::MemoryRegistry* registry = ringMh_->registry;
    registry->deregister(ringMh_);
    registry->releaseOwed();
    ringMh_ = nullptr;
  }
  Lock lock(dev.domainLock());
  dev.closeComm(*this);  // frees the group once the provider holds none of its operations
  return result;
}

void Group::releaseRegistrations() {
  for (auto& context : contexts_) {
    context->forEach([this](Request& request) { releaseHeld(request); });
  }
}

}  // namespace nnf::rma
