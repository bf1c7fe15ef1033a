// One RMA group (NCCL's collComm): every rank of an NCCL communicator on one device, connected
// at once by connect() (collective), with the symmetric windows registered on it (regMrSym,
// collective), the contexts NCCL issues operations through, and per peer one link each way.
//
// The group is a comm of its device: it has a comm id there (peers' set-up messages name it),
// posts its operations on the device's endpoints (one per rail, shared with the net plugin and
// every other group), and is freed by the device once the provider holds none of its operations
// (core::Device::closeComm), so that closing with operations in flight touches nothing later.
//
// Wire and ordering: docs/rma.md. Its member functions, a file per concern: set-up
// (group_setup.cc), the collective exchange (group_exchange.cc), peer liveness
// (group_liveness.cc), symmetric windows (group_windows.cc), close (group_close.cc); the source's
// calls and their argument checks (group_transfers.cc), their cut over the rails
// (group_shares.cc), signaled puts' entries (group_signal.cc), completions and test/progress
// (group_completion.cc); the target's side, landed writes, signals, credits (group_target.cc).
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/control_arena.h"
#include "core/memory_handle.h"
#include "core/operation.h"
#include "nccl_net/types.h"
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
  void replacePeer(size_t rail, fi_addr_t from, fi_addr_t to) override;
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
  abi::Result put(Context& ctx, int stream, Window* src, uint64_t srcOff, size_t size, Window* dst,
                  uint64_t dstOff, uint32_t rank, const SignalArgs* signal, Request** out);
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
  void onControlMessage(core::wire::ControlKind kind, const uint8_t* data, size_t length,
                        size_t rail) override;
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
    // Closing: our writes that reached it (completed, or injected), its writes that landed here,
    // and its close notice (how many of its writes reached us).
    uint64_t written = 0;
    uint64_t landed = 0;
    bool closeHeard = false;
    uint64_t closeWrites = 0;
    bool blockedListed = false;  // in blockedPeers_
    bool creditOwed = false;
    uint32_t creditValue = 0;
  };

  // What peers and the NIC may do with our registrations (windows, the ring area).
  static constexpr uint64_t kRmaAccess = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

  // group_setup.cc
  bool allocateRing();
  bool fillJoin(JoinMessage* join);  // false: a rail's address does not fit (logged)

  // group_exchange.cc: what a collective set-up waits for from every rank: its join, or its
  // record of the window being registered.
  enum class Phase { kJoins, kWindow };
  bool exchange(const char* what, Phase phase);
  uint32_t firstMissing(Phase phase) const;  // nranks_: none
  abi::Result sendMessage(uint32_t peer, uint32_t remoteId, const void* payload, size_t length);
  void noteError() { lastError_.store(true, std::memory_order_relaxed); }

  // group_liveness.cc
  void checkPeers(uint64_t now, bool waitingForSetUp);
  void markDead(uint32_t peer, const char* why);
  void failWaiting(uint32_t peer);

  // group_windows.cc
  void storeRecord(const WindowMessage& record);
  // Peers' records of window `index` that came before this rank registered it.
  void storeEarlyRecords(uint32_t index);

  // group_close.cc: closeColl's steps: our operations end, every rank hears how many of our
  // writes reached it, and we wait until as many of its writes have landed here (bounded; dead
  // ranks excepted).
  abi::Result quiesce(uint64_t boundNs);
  void sendCloseNotices();
  uint32_t firstUnclosed() const;  // nranks_: every rank closed, or need not
  void awaitPeersWrites(uint64_t boundNs);
  // Of a request's operations still with the provider: the data's and the signal entries'.
  int requestOpsOut() const { return callerOps_ + entryOps_; }

  // group_transfers.cc: the calls' argument checks, each failure one WARN.
  abi::Result checkWindow(const Window* window, const char* entry, const char* what) const;
  abi::Result checkPut(const Context& ctx, int stream, const Window* src, uint64_t srcOff,
                       size_t size, const Window* dst, uint64_t dstOff, uint32_t rank,
                       const char* entry) const;
  abi::Result checkSignal(const SignalArgs& signal, size_t size, uint32_t rank) const;
  abi::Result checkGet(const Context& ctx, int stream, const Window* remoteWindow,
                       uint64_t remoteOff, size_t size, const Window* local, uint64_t localOff,
                       uint32_t rank) const;
  abi::Result postFlushRead(Request& request, Window& window);

  // group_shares.cc: a request's data cut over the rails and posted.
  abi::Result postOp(core::Operation& op);
  uint64_t segmentCount(uint64_t length) const;  // writes of at most segmentMax_
  void planShares(Request& request, uint8_t* localBase, uint64_t remoteAddress, size_t size,
                  const uint64_t* keys, core::MemoryHandle* localMh, uint64_t immediate, bool read);
  abi::Result postShares(Request& request, bool inject);
  void hold(Request& request, core::MemoryHandle* mh);
  void releaseHeld(Request& request);

  // group_signal.cc: a signaled put starts once the target's ring has a slot for its entry.
  void queueSignaled(Request& request, const SignalArgs& signal);
  bool startSignaled(Request& request);  // false: no slot free yet
  SignalEntry& stageEntry(const Request& request, uint32_t slot, bool inlined);
  core::Operation& prepareEntryWrite(Request& request, uint32_t slot, SignalEntry& staged);
  void startWaiting(uint32_t peer);

  // group_completion.cc
  void finishOp(OpSlot& slot, bool ok, abi::Result error);
  void postNextSegment(Request& request, OpSlot& slot);
  void settle(Request& request);
  void finished(Request& request);
  void fail(Request& request, abi::Result error);
  // A request NCCL never gets (its call returned an error): it goes back to the pool once the
  // provider has returned its operations.
  void abandon(Request& request, abi::Result error);
  uint32_t peerOf(core::Operation& op) const;
  void reportOpError(const core::Operation& op, uint32_t peer, int error, const char* text);
  void maintain();

  // group_target.cc
  bool apply(uint32_t peer, const SignalEntry& entry, const uint8_t* payload) override;
  void credit(uint32_t peer, uint32_t freed) override;
  bool postRead(uint32_t index, uint32_t window, uint64_t offset) override;
  bool postWrite(uint32_t index, uint32_t window, uint64_t offset, uint64_t value) override;
  void sendCredit(uint32_t peer);
  void onWordDone(WordOp& op, bool ok);
  void retryBlocked();
  void targetError(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  // The id of `peer`'s link from this rank, which our writes to it name in their immediate data.
  uint32_t linkAt(uint32_t peer) const { return peers_[peer].linkBase + rank_; }
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
  int opsOut_ = 0;           // operations with the provider or queued for it
  int callerOps_ = 0;        // of them, those on NCCL's memory
  int entryOps_ = 0;         // and the signal entries' writes
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
