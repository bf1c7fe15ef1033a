// What send and receive comms share: the connected peer, the per-tag sequence numbers, and the
// request pool sized at creation (no allocation per message).
#pragma once

#include <rdma/fabric.h>

#include <functional>
#include <memory>

#include "core/comm.h"
#include "core/memory_registry.h"
#include "core/protocol.h"
#include "core/request.h"
#include "core/sequence_table.h"
#include "core/silence_watch.h"
#include "core/wire.h"
#include "memory/region.h"

namespace nnf::core {

class DataComm : public Comm {
 public:
  // `requests` at most, their operations from `ops` (a pool of the device; null: one operation
  // per request, carried inline).
  DataComm(Device& device, Kind kind, uint32_t id, size_t requests, OpPool* ops,
           size_t inlineOps = 1);

  RequestPool& pool() { return pool_; }
  // The protocol's own state in this comm (null when it keeps none).
  protocol::CommState* protocolState() const { return protocolState_.get(); }
  void setProtocolState(std::unique_ptr<protocol::CommState> state) {
    protocolState_ = std::move(state);
  }
  // Flush requests have a pool of their own: NCCL treats a NULL flush request as "done", so a
  // flush must never find the pool exhausted by receives.
  RequestPool& flushPool() { return flushPool_; }
  SequenceTable& sequences() { return sequences_; }
  // The next sequence number of `tag` on this comm; false (with a WARN) when the comm already
  // carries as many distinct tags as it can.
  bool nextSequence(int tag, uint32_t* seq) {
    int64_t next = sequences_.next(tag);
    if (next < 0) return tooManyTags();
    *seq = static_cast<uint32_t>(next);
    return true;
  }
  fi_addr_t peer() const { return peer_; }
  // The peer on each rail both ends drive (a send comm learns them from the accept message;
  // rail 0 is peer()). Data may move on rails 0..rails()-1.
  fi_addr_t peer(size_t rail) const { return rail == 0 ? peer_ : railPeers_[rail - 1]; }
  // Each of the comm's own operations (its set-up message, pings, the protocol's own writes and
  // messages) that is with the provider on `rail`.
  void forEachOwnInFlightOn(size_t rail, const std::function<void(Operation&)>& visit);
  // Each operation of the comm's requests that is with the provider on `rail`.
  template <typename Visit>
  void forEachInFlightOn(size_t rail, Visit&& visit) {
    forEachRequest([&](Request& request) {
      for (int i = 0; i < request.count; ++i) {
        if (request.ops[i].inFlight && request.ops[i].rail == rail) visit(request.ops[i]);
      }
    });
  }
  void replacePeer(size_t rail, fi_addr_t from, fi_addr_t to) override {
    fi_addr_t& current = rail == 0 ? peer_ : railPeers_[rail - 1];
    if (current == from) current = to;
  }
  size_t rails() const { return rails_; }
  // Bit r: the path to our peer on rail r is broken beyond our NIC (core/path_health.h); new
  // messages leave it out as they leave out a rail that is down. Kept by the device.
  uint32_t pathsDown() const { return pathsDown_; }
  void setPathsDown(uint32_t mask) { pathsDown_ = mask; }
  uint32_t remoteId() const { return remoteId_; }
  // Whether the comm's writes stop completing on one rail (core/silence_watch.h), and the rails
  // on which one of its writes is with the provider (bit r), for the device's looks.
  SilenceWatch& silence() { return silence_; }
  // A ping to the peer over the first rail up that is not among `stuck` (the rails it is to
  // witness for, the leader among them), whose delivery counts for that rail
  // (SilenceWatch::Findings::unwitnessed); none while one is in flight.
  void pingForWitness(uint32_t stuck);
  // Its own operations count too (a receive comm's descriptor and credit writes, its control
  // messages): a silent leader holds them.
  uint32_t railsWriting();

  ~DataComm() override;

  // A send's operations went to the provider (or its queue): its registration stays valid until
  // the last of them ends, whatever NCCL deregisters meanwhile (a closing comm keeps them going).
  // Inline: every posted send and rdma write passes here.
  void holdRegistration(Request& request, MemoryHandle* handle) {
    if (handle == nullptr || request.remaining == 0 || request.heldRegistration != nullptr) return;
    beginUse(handle);
    request.heldRegistration = handle;
  }
  // The same for a posted receive: its registration stays until the provider has given it back.
  void holdRegistration(Operation& op, MemoryHandle* handle) {
    if (handle == nullptr) return;
    beginUse(handle);
    op.heldRegistration = handle;
  }
  static void releaseRegistration(Operation& op) {
    if (op.heldRegistration == nullptr) return;
    endUse(op.heldRegistration);
    op.heldRegistration = nullptr;
  }
  void releaseRegistrations() override;

  // A data operation finished: record its size and finish the request when it was the last.
  void onComplete(Operation& op, size_t length) override;
  void onError(Operation& op, int error, size_t overflow, const char* text) override;
  int inFlight() const override;
  int callerOpsInFlight() const override;
  bool peerGone() override;

  // Peer liveness. The handshake tells who the peer is; a request that waits too long makes the
  // comm check that the peer is alive (its pid when on this host, a ping otherwise) and, when
  // NCCL_FABRIC_REQUEST_TIMEOUT_S is set, fails once that time has passed.
  // Pings arrive through the device's control channel: liveness posts no receive per comm.
  void setPeerIdentity(uint32_t pid, uint64_t hostId);
  // Called by every test() of a pending request; looks at the clock only every few calls, since
  // polling loops call it millions of times a second and the checks work in milliseconds.
  void checkStalled(Request& request) {
    if (--stallCheckCountdown_ != 0) return;
    stallCheckCountdown_ = kStallCheckInterval;
    checkStalledNow(request);
  }
  bool peerFailed() const { return peerFailed_; }
  // isend and irecv refuse: the peer died, or (rdma) the receiver closed its end.
  bool refusesRequests() const { return peerFailed_ || peerClosed_; }

  // Something the comm's data depends on was lost on the way (a write of the peer's failed at our
  // NIC): every pending request fails, and later ones are refused, as after the peer's death.
  void failLost(const char* why) { failPeer(why); }

  // Gives up a request whose posting failed: cancels what was posted; the request returns to
  // the pool once the provider has let go of it.
  void abandon(Request& request);

  // Hands a finished (done or failed) request back after test() has reported it. A failed request
  // whose other operations are still with the provider is kept until they complete.
  void retire(Request& request) {
    // A failed request may still hold protocol state that names it (an rdma receive slot).
    if (request.state != Request::State::kDone) forgetInProtocol(request);
    if (request.remaining == 0) {
      poolOf(request).release(&request);
    } else {
      request.state = Request::State::kAbandoned;
    }
  }

 protected:
  // Set-up messages are handled by the concrete comm; data operations here.
  virtual void onControlComplete(Operation& op, size_t length) = 0;
  virtual void onControlError(Operation& op, int error, const char* text) = 0;
  void cancelInFlight() override;
  // The set-up message (connect, accept).
  virtual Operation& setUpSend() = 0;

  void finish(Request& request);
  void releaseRegistration(Request& request);
  void forgetInProtocol(Request& request);
  // A read of our own into one of the comm's receives (a flush, or the protocol's copy into GPU
  // memory) failed with `error`: when that says its rail broke and another is up, it goes again
  // through that one (true: in flight again, its registration still held).
  bool readAgain(Operation& op, int error);
  void checkStalledNow(Request& request);
  bool tooManyTags();  // WARNs; false
  static constexpr uint32_t kStallCheckInterval = 64;
  uint32_t stallCheckCountdown_ = kStallCheckInterval;
  RequestPool& poolOf(const Request& request) { return pool_.owns(&request) ? pool_ : flushPool_; }
  template <typename Visit>
  void forEachRequest(Visit&& visit) {
    pool_.forEach(visit);
    flushPool_.forEach(visit);
  }
  // Takes the peer's rails beyond its leader from its set-up message (`who`: "the sender", for
  // the WARN): the comm moves data on the rails both devices have, rail r to rail r (the same
  // network). False, logged, when an address cannot be added.
  bool adoptPeerRails(const wire::RailAddresses& peerRails, const char* who);
  // The listener's rails as its handle names them (those that fit), until its accept message
  // names them all: the connect message goes on the first of them up. False, logged, as above.
  bool adoptListenerRails(const wire::ListenHandle& handle);
  // Both: rails 1..peerRails-1 of the peer at `addresses[r]`, each `length` bytes.
  bool adoptRails(size_t peerRails, const uint8_t* const* addresses, size_t length,
                  const char* who);
  // Where a set-up message goes: `preferred` (the rail the peer's came on) while it is usable,
  // else the first usable rail of the comm.
  size_t setUpRail(size_t preferred) const;
  // `quiet`: an expected death (found while closing) is logged at INFO only.
  void failPeer(const char* why, bool quiet = false);
  // The peer takes nothing more, but what is in flight finishes on its own (rdma: the receiver
  // closed after taking those writes): fails the requests not yet with the provider and any new
  // one; the others complete or fail as the provider reports them.
  void failUnposted(const char* why);
  // On this host the peer's pid answers at once: true, and the comm failed, once it has exited.
  bool peerProcessExited(bool quiet);
  void sendPing();  // zero bytes to the peer's ping receive; its failure means the peer is gone
  void sendPingVia(size_t rail);  // the same on `rail`; none while one is in flight
  bool isPing(const Operation& op) const { return &op == &pingSend_; }
  void onPing(Operation& op, int error, const char* text);

  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  fi_addr_t railPeers_[memory::kMaxRails - 1] = {};
  size_t rails_ = 1;
  uint32_t pathsDown_ = 0;  // pathsDown()
  uint32_t remoteId_ = 0;

 private:
  SilenceWatch silence_;
  RequestPool pool_;
  RequestPool flushPool_;
  SequenceTable sequences_;
  Operation pingSend_;
  uint32_t peerPid_ = 0;
  bool peerLocal_ = false;
  bool peerFailed_ = false;
  // The peer closed its end but lives: unlike a death, what is in flight still completes, and a
  // close waits for it (the provider still reads the buffers NCCL frees after our close).
  bool peerClosed_ = false;
  bool errorReported_ = false;  // one WARN per comm for network errors; the rest go to INFO
  bool pingsDetectDeath_ = false;
  uint64_t peerCheckNs_ = 0;
  uint64_t requestTimeoutNs_ = 0;
  uint64_t lastPeerCheckNs_ = 0;
  std::unique_ptr<protocol::CommState> protocolState_;
};

}  // namespace nnf::core
