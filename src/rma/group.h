// One RMA group (NCCL's collComm): every rank of an NCCL communicator on one device, connected
// at once by connect() (collective), with the symmetric windows registered on it (regMrSym,
// collective), the contexts NCCL issues operations through, and per peer one link each way.
//
// The group is a comm of its device: it has a comm id there (peers' set-up messages name it),
// posts its operations on the device's endpoints (one per rail, shared with the net plugin and
// every other group), and is freed by the device once the provider holds none of its operations
// (core::Device::closeComm), so that closing with operations in flight touches nothing later.
//
// Wire and ordering: docs/rma.md. Set-up in group_setup.cc, the source's operations in
// group_ops.cc, the target's side (landed writes, signals, credits) in group_target.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nccl_net/types.h"
#include "core/comm.h"
#include "core/control_arena.h"
#include "core/memory_handle.h"
#include "core/operation.h"
#include "rma/context.h"
#include "rma/handles.h"
#include "rma/links.h"
#include "rma/request.h"
#include "rma/signal_words.h"
#include "rma/window.h"
#include "rma/wire.h"

namespace nnf::core {
class Device;
}

namespace nnf::rma {

class Engine;
class Listener;

// iputSignal's signal: the word at `offset` of `window` at the target grows by one (INC) or by
// `value` (ADD).
struct SignalArgs {
  Window* window = nullptr;
  uint64_t offset = 0;
  uint64_t value = 0;
  uint32_t op = 0;
  bool strong = true;
};

class Group final : public core::Comm, private InboundLink::Actions, private SignalWords::Io {
 public:
  Group(core::Device& device, uint32_t id, Engine& engine, uint32_t rank, uint32_t nranks);
  ~Group() override;

  void* handle() { return &ref_; }
  uint32_t rank() const { return rank_; }
  uint32_t nranks() const { return nranks_; }
  Engine& engine() const { return engine_; }
  bool failed() const { return lastError_.load(std::memory_order_relaxed); }

  // --- set-up: collective and blocking; they take the device lock themselves ---

  // Joins every rank: `handles` are all ranks' listen handles (validated), `listener` ours.
  abi::Result connect(Listener& listener, const std::vector<ListenHandle>& handles);
  abi::Result registerWindow(void* data, size_t size, int type, uint64_t dmabufOffset, int fd,
                             uint64_t flags, Window** out);
  abi::Result deregisterWindow(Window& window);
  abi::Result createContext(int streams, Context** out);
  abi::Result destroyContext(Context& context);
  // closeColl: waits (bounded) for the operations on NCCL's memory, ends the windows and hands
  // the group to the device, which frees it once the provider gives back its last operation.
  abi::Result close();

  // --- data path: device lock not held ---

  // iput (signal null) and iputSignal. Arguments are validated here, each failure one WARN.
  abi::Result put(Context& ctx, int stream, Window* src, uint64_t srcOff, size_t size,
                  Window* dst, uint64_t dstOff, uint32_t rank, const SignalArgs* signal,
                  Request** out);
  abi::Result get(Context& ctx, int stream, Window* remote, uint64_t remoteOff, size_t size,
                  Window* local, uint64_t localOff, uint32_t rank, Request** out);
  // *out null: nothing to flush (host memory).
  abi::Result flush(Context& ctx, int stream, Window* window, uint32_t rank, Request** out);
  abi::Result test(Request& request, int* done);
  abi::Result progress();

  // --- device lock held ---

  // A peer's write landed (the engine found this group by the link id).
  void onRemote(uint32_t peer, ImmKind kind, uint32_t field);
  // A join message for this group's listener (forwarded by the listener).
  void onJoin(const JoinMessage& join);
  void onListenerClosed() { listener_ = nullptr; }
  void onControlMessage(core::wire::ControlKind kind, const uint8_t* data, size_t length) override;
  void onComplete(core::Operation& op, size_t length) override;
  void onError(core::Operation& op, int error, size_t overflow, const char* text) override;
  int inFlight() const override { return opsOut_; }
  int callerOpsInFlight() const override { return callerOps_; }
  bool peerGone() override;
  void releaseRegistrations() override;

 protected:
  void cancelInFlight() override;

 private:
  // What an operation of the group is for (Operation::index).
  enum Role : uint8_t { kRoleShare, kRoleEntry, kRoleMessage, kRoleCredit, kRoleWord, kRoleFlush };
  struct PeerOp {
    core::Operation op;  // first (core::recordOf)
    uint32_t peer = 0;
  };
  struct WordOp {
    core::Operation op;
    uint32_t index = 0;
  };
  struct Peer {
    // From its join message.
    bool joined = false;
    bool local = false;  // on this host: its pid tells whether it lives
    bool dead = false;
    uint32_t pid = 0;
    uint32_t groupId = 0;
    uint32_t session = 0;
    uint32_t linkBase = 0;
    uint64_t ringAddress = 0;
    uint64_t ringKey = 0;
    size_t rails = 1;  // rails both ends drive
    fi_addr_t addr[memory::kMaxRails] = {};
    // Set-up messages to it.
    PeerOp message;
    core::ControlSlot slot;
    bool messageFailed = false;
    // Source side of the link toward it.
    OutboundLink out;
    uint64_t stagingBusy = 0;  // ring entries of ours whose write is still with the provider
    Request* waitHead = nullptr;
    Request* waitTail = nullptr;
    uint32_t turn = 0;         // rail of its next unstriped operation
    uint32_t outstanding = 0;  // requests toward it not finished
    uint64_t sinceNs = 0;      // the last time one of them moved
    // Target side of the link from it.
    InboundLink in;
    PeerOp credit;
    bool blockedListed = false;  // in blockedPeers_
    bool creditOwed = false;
    uint32_t creditValue = 0;
  };

  // group_setup.cc
  bool allocateRing();
  // What a collective set-up waits for from every rank: its join, or its record of the window
  // being registered.
  enum class Phase { kJoins, kWindow };
  bool exchange(const char* what, Phase phase);
  uint32_t firstMissing(Phase phase) const;  // nranks_: none
  abi::Result sendMessage(uint32_t peer, uint32_t remoteId, const void* payload, size_t length);
  void checkPeers(uint64_t now, bool waitingForSetUp);
  void markDead(uint32_t peer, const char* why);
  void noteError() { lastError_.store(true, std::memory_order_relaxed); }
  void storeRecord(const WindowMessage& record);

  // group_ops.cc
  abi::Result checkWindow(const Window* window, const char* entry, const char* what) const;
  abi::Result postOp(core::Operation& op);
  void planShares(Request& request, uint8_t* localBase, uint64_t remoteAddress, size_t size,
                  const uint64_t* keys, core::MemoryHandle* localMh, uint64_t immediate,
                  bool read);
  abi::Result postShares(Request& request, bool inject);
  bool startSignaled(Request& request);
  void startWaiting(uint32_t peer);
  void finishOp(OpSlot& slot, bool ok, abi::Result error);
  void settle(Request& request);
  void finished(Request& request);
  void fail(Request& request, abi::Result error);
  // A request NCCL never gets (its call returned an error): it goes back to the pool once the
  // provider has returned its operations.
  void abandon(Request& request, abi::Result error);
  void maintain();
  void hold(Request& request, core::MemoryHandle* mh);
  void releaseHeld(Request& request);
  uint32_t linkAt(uint32_t peer) const { return peers_[peer].linkBase + rank_; }

  // group_target.cc
  bool apply(uint32_t peer, const SignalEntry& entry, const uint8_t* payload) override;
  void credit(uint32_t peer, uint32_t freed) override;
  bool postRead(uint32_t index, uint32_t window, uint64_t offset) override;
  bool postWrite(uint32_t index, uint32_t window, uint64_t offset, uint64_t value) override;
  void sendCredit(uint32_t peer);
  void onWordDone(WordOp& op, bool ok);
  void retryBlocked();
  void targetError(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  uint8_t* inboundEntry(uint32_t peer, uint32_t slot) const {
    return ring_ + (size_t{peer} * kSlots + slot) * kEntryBytes;
  }
  uint8_t* stagingEntry(uint32_t peer, uint32_t slot) const {
    return ring_ + (size_t{nranks_ + peer} * kSlots + slot) * kEntryBytes;
  }
  uint64_t* stagingWord(uint32_t index) const {
    return reinterpret_cast<uint64_t*>(ring_ + wordsOffset_) + index;
  }

  HandleRef ref_;  // what NCCL holds (collComm)
  Engine& engine_;
  uint32_t rank_;
  uint32_t nranks_;
  uint32_t session_;
  uint32_t linkBase_ = 0;
  bool linksHeld_ = false;
  size_t rails_ = 1;  // ours
  std::unique_ptr<Peer[]> peers_;
  Listener* listener_ = nullptr;
  bool connected_ = false;
  bool closing_ = false;
  // Our rings of entries from each peer, our staging of entries to each, the GPU signal words'
  // host words and the flush word: one registered area.
  uint8_t* ring_ = nullptr;
  size_t ringBytes_ = 0;
  size_t wordsOffset_ = 0;
  size_t flushOffset_ = 0;
  core::MemoryHandle* ringMh_ = nullptr;
  bool ringLeaked_ = false;
  std::vector<std::unique_ptr<Window>> windows_;
  std::vector<WindowMessage> records_;  // peers' records of windows not registered here yet
  uint32_t recordsWanted_ = 0;          // the window whose records regMrSym waits for
  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<SignalWords> words_;
  std::unique_ptr<WordOp[]> wordOps_;
  std::vector<uint32_t> blockedPeers_;  // inbound links with applies refused
  std::vector<uint32_t> retrying_;
  int opsOut_ = 0;     // operations with the provider or queued for it
  int callerOps_ = 0;  // of them, those on NCCL's memory
  uint64_t segmentMax_ = 0;  // the largest write or read the provider does whole, every rail
  size_t injectLimit_ = 0;
  size_t stripeMin_ = 0;
  uint64_t peerCheckNs_ = 0;
  uint64_t lastCheckNs_ = 0;
  uint32_t stallCountdown_ = 64;
  std::atomic<bool> lastError_{false};
  bool targetWarned_ = false;
};

}  // namespace nnf::rma
