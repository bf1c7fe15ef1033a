// A rail's endpoint that reports an error of its own, and the writes it strands. On efa the
// first operation toward a peer starts a handshake; when that fails (the NIC or its link is
// down) the endpoint reports it on its event queue, naming no operation, and what efa queued
// behind the handshake is never sent and never completed: without this, those requests would
// wait for ever (seen on the software EFA device, docs/failover.md).
#include <rdma/fi_errno.h>

#include <algorithm>
#include <vector>

#include "core/data_comm.h"
#include "core/device.h"
#include "log/log.h"

namespace nnf::core {
namespace {

// How long a rail's writes may still complete on their own after its endpoint failed. What is
// left then is taken back; a write that would have landed after all is asked about like any
// write of a broken path (the receiver knows what landed), so a short grace costs a round trip
// at most.
constexpr uint64_t kStrandedGraceNs = 100 * 1000 * 1000;

}  // namespace

void Device::onEndpointError(size_t rail, int error, const char* text) {
  if (rail >= railCount_) return;
  // A broken path: the rail goes down (or the paths beyond it), and its writes get their grace.
  // The leader's too: a comm connecting to a peer whose leader NIC was down before our first
  // message to it meets this there, its connect message held behind the handshake.
  if (railCount_ > 1 && RailHealth::isPathFailure(error)) {
    char what[320];
    snprintf(what, sizeof(what), "reported an endpoint error: %s", text);
    if (pathProbe_ != nullptr && railHealth_.state(rail) == RailState::kUp) {
      // Which peer's handshake failed, efa does not say: the writes still held once the grace
      // is over tell (releaseStranded). Meanwhile our NIC is asked: when it fails too, the rail
      // goes down as before.
      snprintf(endpointWhat_[rail], sizeof(endpointWhat_[rail]), "%s", what);
      classifyRail(rail);
    } else {
      railPathBroke(rail, what);
    }
    if (strandedDueNs_[rail] == 0) strandedDueNs_[rail] = nowNs() + kStrandedGraceNs;
    if (keeper_ != nullptr) keeper_->wake();
    return;
  }
  // The comms to that peer fail through their own operations; this says why, once a rail.
  if ((endpointErrorsReported_ & (1u << rail)) != 0) return;
  endpointErrorsReported_ |= 1u << rail;
  NNF_WARN("device %d: NIC %s reported an endpoint error: %s", index_, railName(rail), text);
}

uint64_t Device::releaseStrandedWhenDue(uint64_t now) {
  uint64_t wait = UINT64_MAX;
  for (size_t rail = 0; rail < railCount_; ++rail) {
    uint64_t due = strandedDueNs_[rail];
    if (due == 0) continue;
    if (now < due) {
      wait = std::min(wait, due - now);
      continue;
    }
    strandedDueNs_[rail] = 0;
    releaseStranded(rail);
  }
  return wait;
}

void Device::releaseStranded(size_t rail) {
  // The operations on that rail still with the provider: the requests' data and eager writes,
  // and the comms' own (set-up messages, pings, descriptors, credits, the protocol's messages),
  // which go on the leader while it is up.
  std::vector<fi_addr_t> peers;
  auto strand = [&](Operation& op) {
    if (std::find(peers.begin(), peers.end(), op.peer) == peers.end()) peers.push_back(op.peer);
  };
  // A path probe whose handshake failed is never completed either: it fails, and is probed again.
  if (pathProbe_ != nullptr) pathProbe_->forEachInFlightOn(rail, strand);
  // The net ABI's comms (the RMA layer's groups keep their own operations: what efa stranded of
  // theirs stays so, as before).
  forEachDataComm([&](DataComm& comm) {
    comm.forEachInFlightOn(rail, strand);
    comm.forEachOwnInFlightOn(rail, strand);
  });
  if (peers.empty()) return;
  // Our NIC works (the rail is still up after its read): the handshakes of these peers failed
  // beyond it, and their paths go down instead of the rail, before their writes fail and go
  // again on the rails their comms may still use.
  if (railHealth_.state(rail) == RailState::kUp) {
    for (fi_addr_t peer : peers) pathBrokeBeyondOurNic(rail, peer, endpointWhat_[rail]);
  }
  size_t count = takeBack(rail, peers, "stranded by its NIC's endpoint error");
  NNF_INFO(abi::kLogSubsysNet,
           "device %d: %zu write(s) to %zu peer(s) still held on rail %zu (NIC %s) %llu ms after "
           "its endpoint failed: taken back and sent again on the rails left",
           index_, count, peers.size(), rail, railName(rail),
           static_cast<unsigned long long>(kStrandedGraceNs / 1000000));
}

size_t Device::takeBack(size_t rail, std::vector<fi_addr_t>& peers, const char* why) {
  std::vector<Operation*> stranded;
  auto strand = [&](Operation& op) {
    if (std::find(peers.begin(), peers.end(), op.peer) != peers.end()) stranded.push_back(&op);
  };
  if (pathProbe_ != nullptr) pathProbe_->forEachInFlightOn(rail, strand);
  // Their own operations too: removing the peer drops them as well.
  forEachDataComm([&](DataComm& comm) {
    comm.forEachInFlightOn(rail, strand);
    comm.forEachOwnInFlightOn(rail, strand);
  });
  // Removing the peer makes the provider drop what it holds for it without a completion (efa),
  // so that none can come for an operation that is sent again, or reused. A peer the provider
  // would not forget keeps its writes.
  std::vector<fi_addr_t> removed;
  for (fi_addr_t peer : peers) {
    int ret = rails_->removeAddress(rail, peer);
    if (ret == 0) {
      removed.push_back(peer);
      continue;
    }
    NNF_WARN("device %d: removing a peer's address from rail %zu (NIC %s) failed: %s", index_, rail,
             railName(rail), fi_strerror(-ret));
  }
  size_t count = 0;
  for (Operation* op : stranded) {
    // An earlier one's failure may have ended this one too (its request failed whole).
    if (!op->inFlight) continue;
    if (std::find(removed.begin(), removed.end(), op->peer) == removed.end()) continue;
    engine_->release(*op);
    op->owner->onError(*op, FI_EHOSTUNREACH, 0, why);
    ++count;
  }
  peers.swap(removed);
  // The addresses again, fresh (a new handshake when the rail works again), for every comm.
  for (auto& [key, address] : peers_) {
    if (key.first != rail || std::find(peers.begin(), peers.end(), address) == peers.end())
      continue;
    fi_addr_t fresh = FI_ADDR_UNSPEC;
    int ret = rails_->insertAddress(rail, key.second.data(), key.second.size(), &fresh);
    if (ret != 0) {
      NNF_WARN(
          "device %d: a peer's address could not be inserted again on rail %zu (NIC %s): "
          "%s; its comms keep the rail down",
          index_, rail, railName(rail), fi_strerror(-ret));
      continue;
    }
    for (auto& entry : comms_) entry.second->replacePeer(rail, address, fresh);
    paths_.replacePeer(rail, address, fresh);
    address = fresh;
  }
  return count;
}

}  // namespace nnf::core
