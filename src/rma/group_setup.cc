// A group's set-up: the group itself, its ring area, connect (every rank joins every rank) and
// its contexts. connect blocks in the collective exchange (group_exchange.cc) until every rank
// has joined; the windows' registration is group_windows.cc, closing group_close.cc.
#include <algorithm>
#include <cstdlib>
#include <cstring>

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
  // Cut over every rail from NCCL_FABRIC_STRIPE_MIN on, as the rdma protocol's messages are.
  stripeMin_ = static_cast<size_t>(device.config().integer(config::Param::kStripeMin));
  // One completion per segment at the target: no segment larger than a rail writes whole (EFA
  // cuts writes above 1 GiB into pieces that each raise a completion).
  segmentMax_ = uint64_t{1} << 30;
  for (size_t r = 0; r < rails_; ++r) {
    const fi_ep_attr* ep = device.rail(r).info()->ep_attr;
    if (ep != nullptr && ep->max_msg_size > 0)
      segmentMax_ = std::min<uint64_t>(segmentMax_, ep->max_msg_size);
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
    NNF_WARN("RMA connect: no memory for the %zu-byte ring area of a group of %u ranks", ringBytes_,
             nranks_);
    return false;
  }
  memset(ring_, 0, ringBytes_);
  // Peers write entries and credits into it, the NIC reads and writes its host words.
  if (device().memory().registerHost(ring_, ringBytes_, FI_SEND | FI_RECV | kRmaAccess, &ringMh_) !=
      abi::kSuccess) {
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
    if (!fillJoin(&join)) return abi::kSystemError;
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

bool Group::fillJoin(JoinMessage* join) {
  core::Device& dev = device();
  join->magic = JoinMessage::kMagic;
  join->version = kVersion;
  join->kind = static_cast<uint32_t>(MessageKind::kJoin);
  join->rank = rank_;
  join->nranks = nranks_;
  join->groupId = id();
  join->session = session_;
  join->linkBase = linkBase_;
  join->pid = core::wire::localPid();
  join->hostId = core::wire::localHostId();
  join->ringAddress = ringMh_->remoteAddress(ring_);
  join->ringKey = ringMh_->key();
  join->rails = static_cast<uint16_t>(rails_);
  // Rail 0's address is the one in our listen handle; the others travel here.
  for (size_t r = 1; r < rails_; ++r) {
    const std::vector<uint8_t>& address = dev.rail(r).address();
    if (address.size() > kMaxRailAddress) {
      NNF_WARN("RMA connect: rail %zu's address of %zu bytes exceeds %zu", r, address.size(),
               kMaxRailAddress);
      return false;
    }
    join->railAddressLength = static_cast<uint16_t>(address.size());
    memcpy(join->railAddresses[r - 1], address.data(), address.size());
  }
  return true;
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
    if (device().peerAddress(join.railAddresses[r - 1], join.railAddressLength, &peer.addr[r], r) !=
        0) {
      NNF_WARN("RMA connect: rank %u's rail %zu address is refused; its data takes %zu rail(s)",
               join.rank, r, r);
      rails = r;
      break;
    }
  }
  peer.rails = rails;
  peer.joined = true;
}

void Group::replacePeer(size_t rail, fi_addr_t from, fi_addr_t to) {
  if (rail >= memory::kMaxRails) return;
  for (uint32_t p = 0; p < nranks_; ++p) {
    if (peers_[p].addr[rail] == from) peers_[p].addr[rail] = to;
  }
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

}  // namespace nnf::rma
