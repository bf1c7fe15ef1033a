// One NCCL device: its rails (NICs, with the endpoint each shares among every comm on the device)
// and the operation engine that moves its operations on them (core/device_rails.h), the control
// channel, the comms themselves, and what every protocol uses per device (arenas, registry,
// drains). The device dispatches what the engine reads: the peers' writes to its protocol or to
// the RMA layer. All of it is guarded by one lock, because NCCL drives different comms of a
// device from several proxy threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "core/comm.h"
#include "core/control_arena.h"
#include "core/control_channel.h"
#include "core/device_rails.h"
#include "core/drain_pool.h"
#include "core/memory_registry.h"
#include "core/op_pool.h"
#include "core/operation.h"
#include "core/operation_engine.h"
#include "core/path_health.h"
#include "core/path_probe.h"
#include "core/progress_keeper.h"
#include "core/protocol.h"
#include "core/rail_health.h"
#include "core/rail_probe.h"
#include "core/remote_writes.h"
#include "core/scratch_area.h"
#include "core/wire.h"
#include "fabric/domain_lock.h"
#include "fabric/rail_attributes.h"
#include "memory/gdr_policy.h"
#include "nccl_net/types.h"

namespace nnf::core {

// Version-neutral device properties (the ABI shims convert them).
struct DeviceProperties {
  std::string name;
  std::string pciPath;  // empty: unknown (reported as NULL)
  uint64_t guid = 0;
  int ptrSupport = abi::kPtrHost;
  int regIsGlobal = 1;
  int speedMbps = 0;
  int port = 1;
  float latencyUs = 0;
  int maxComms = 0;
  int maxRecvs = 1;
  // Largest message one send or receive may carry: the provider's max_msg_size over all rails,
  // and never more than the 1 TiB NCCL accepts as maxP2pBytes.
  size_t maxMessageBytes = abi::kMaxNetSizeBytes;
};

// What the plugin decided a device is: its NICs (rails, leader first) and its properties.
struct DeviceSpec {
  std::vector<const fi_info*> rails;  // what FabricRails opens (empty for rails made in memory)
  const memory::CudaDriver* cuda = nullptr;  // null without CUDA
  bool rmaRead = false;                      // GPUDirect flush by RDMA read is possible
  bool rdma = false;  // move data with the rdma protocol (the rails offer RMA writes with data)
  size_t carryingRails = 1;  // the first this many rails move data (the plan: core/network_plan.h)
  DeviceProperties properties;
  std::vector<std::string> railNames;
  std::vector<std::string> gpus;  // PCI addresses of the GPUs it serves, nearest first
};

class DataComm;

class Device : private protocol::DeviceSetup, private EngineEvents {
 public:
  // A device over `rails` (opened by the plugin: core/fabric_rails.h, the leader only for the
  // sendrecv protocol, up to kMaxRails rails of the group for rdma; or made in memory by a unit
  // test). What opening them refused narrows the device (host memory only, no read flush, no
  // LL128). Its protocol comes from `protocols`. Throws std::runtime_error when a per-device
  // resource cannot be had (construction only).
  Device(int index, const DeviceSpec& spec, std::unique_ptr<DeviceRails> rails,
         const config::Config& config, const protocol::ProtocolFactory& protocols);
  ~Device() override;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int index() const { return index_; }
  const DeviceProperties& properties() const { return properties_; }
  const std::vector<std::string>& railNames() const { return railNames_; }
  const std::vector<std::string>& gpus() const { return gpus_; }
  const config::Config& config() const { return config_; }
  fabric::DomainLock& domainLock() { return rails_->lock(); }
  // The leader rail: control messages, sendrecv data, flush reads, the rdma descriptor rings.
  const fabric::RailAttributes& rail() const { return rails_->rail(0); }
  // Every rail, leader first: the rdma protocol writes data on each (one NIC each); sendrecv
  // opens the leader only.
  const fabric::RailAttributes& rail(size_t index) const { return rails_->rail(index); }
  size_t railCount() const { return railCount_; }
  // This device's rails beyond the leader as set-up messages carry them (one rail where their
  // addresses do not fit: not expected with one provider, data then moves on the leader alone).
  const wire::RailAddresses& railAddresses() const { return railAddresses_; }
  // Which rails carry data (device lock held): a rail whose path broke is left out of new
  // messages' choices (core/rail_health.h).
  const RailHealth& railHealth() const { return railHealth_; }
  // Which paths (a rail of ours to one peer) are broken beyond our NIC (core/path_health.h).
  const PathHealth& pathHealth() const { return paths_; }
  // Bit r: `comm`'s path on rail r is broken (device lock held; what DataComm::pathsDown()
  // caches, refreshed by the device whenever a path changes).
  uint32_t pathsDownOf(const DataComm& comm) const;
  protocol::Protocol& protocol() { return *protocol_; }
  const std::string& provider() const { return provider_; }
  MemoryRegistry& memory() { return *memory_; }
  // The leader rail's registrar: what a protocol keeps per device registers through it.
  memory::Registrar& registrar() { return rails_->leaderRegistrar(); }
  // Registers on every rail of the device (the leader's alone where it has one): the rdma
  // protocol's rings and bounce areas, so that descriptors and eager messages go on any rail.
  memory::Registrar& everyRailRegistrar() { return rails_->dataRegistrar(); }
  const memory::CudaDriver* cuda() const { return cuda_; }
  bool rmaRead() const { return rmaRead_; }
  // NCCL_FABRIC_GDR_FLUSH, read once: iflush asks on every GPU receive.
  memory::FlushSetting flushSetting() const { return flushSetting_; }
  // Target of GPUDirect flush reads: a registered host word and our own address.
  MemoryHandle* flushWord() const { return flushWordHandle_; }
  // Our own address on rail `rail` (reads from our own endpoint: flushes, eager copies).
  fi_addr_t selfAddress(size_t rail = 0) const { return selfAddresses_[rail]; }
  // True for providers that only reach processes on this host (shm).
  bool localOnly() const { return localOnly_; }
  // False when the provider delivers out of order and refused the 128-byte ordering option of
  // the device's protocol: NCCL must then not run LL128 over it (LL and Simple are safe).
  bool ll128Ok() const { return ll128Ok_; }
  // Buffers for connection set-up messages (with descriptors where the provider needs them).
  ControlArena& controlArena() { return *controlArena_; }
  // The one-sided RMA layer's peer writes (core/remote_writes.h) go to `sink` (device lock held;
  // null: none, they are dropped). Set once, when RMA first uses the device.
  void setRemoteWriteSink(RemoteWriteSink* sink) { rmaSink_ = sink; }

  // --- everything below: caller holds domainLock() ---

  // The calls below forward to the device's operation engine (core/operation_engine.h).

  // Reads completions and dispatches them (remote writes to the protocol), then retries queued
  // operations, then frees closed comms the provider gave back. Inline: every test() and every
  // empty poll comes through here.
  abi::Result progress() {
    keeper_->noteProgress();
    abi::Result result = engine_->progress(*this);
    if (result == abi::kSuccess && !closing_.empty()) reapClosed();
    return result;
  }
  // Posts `op`, or queues it when the provider says -FI_EAGAIN, when the device's share of the
  // provider's queue (receive or transmit) is full, or when others of its kind already wait.
  abi::Result post(Operation& op) {
    noteHandedOver();
    return engine_->post(op);
  }
  // Posts `op` for the keeper itself (a rail probe, posted from its turn): not a hand-over that
  // wakes it, as the keeper reads its answer on its own.
  abi::Result postFromKeeper(Operation& op) { return engine_->post(op); }
  void unqueue(Operation& op) { engine_->unqueue(op); }
  // Asks the provider of `op`'s rail to cancel it (a completion, with FI_ECANCELED, follows).
  void cancel(Operation& op) { engine_->cancel(op); }
  // Sends (or, for kWrite, writes) `op` inline when it fits the provider's inject size and nothing
  // waits in the retry queue: no completion will follow, the send is done on return. kInProgress:
  // use post().
  abi::Result inject(const Operation& op) {
    abi::Result result = engine_->inject(op);
    if (result == abi::kSuccess) noteHandedOver();
    return result;
  }
  // The clock the protocols' timing decisions read (OperationEngine::nowNs).
  uint64_t nowNs() const { return engine_->nowNs(); }
  // Inject copies the buffer with the CPU: callers use it for host memory only.
  size_t injectLimit() const { return injectLimit_; }
  // The provider delivers one endpoint's operations to a peer in the order posted (shm, tcp):
  // a later message cannot overtake an earlier write.
  bool deliversInOrder() const { return deliversInOrder_; }

  // Creates a comm with a fresh id; the device owns it until destroyComm().
  template <typename CommType, typename... Args>
  CommType* createComm(Args&&... args) {
    if (!startControl()) return nullptr;
    uint32_t id = allocateId();
    if (id == 0) return nullptr;
    auto comm = std::make_unique<CommType>(*this, id, std::forward<Args>(args)...);
    CommType* raw = comm.get();
    comms_.emplace(id, std::move(comm));
    return raw;
  }
  Comm* findComm(uint32_t id);
  // Closes `comm`: cancels what it has in flight, starts draining late messages for its id, and
  // frees it once the provider holds nothing of it any more (possibly later, during progress).
  // With `hold`, the comm is not freed before releaseClosed(): the closing thread waits on it.
  void closeComm(Comm& comm, bool hold = false);
  void releaseClosed(Comm& comm);
  DrainPool& drains() { return *drains_; }
  // Where the provider must never truncate a receive: the scratch area that takes what does not
  // fit (null elsewhere), and whether data receives get it as room after their buffers.
  ScratchArea* scratch() { return scratch_.get(); }
  bool roomForReceives() const { return roomForReceives_; }
  // The library is being unloaded: the device's own thread stops (device lock not held).
  void stopThreads() { keeper_->stop(); }
  // Unit tests: the device's keeper runs only when the test turns it (ProgressKeeper).
  void driveKeeperManually() { keeper_->driveManually(); }
  void turnKeeperIfDue() { keeper_->turnIfDue(); }
  uint64_t keeperTurns() const { return keeper_->turns(); }
  // Comms closed whose operations the provider still holds (or whose close waits on them).
  size_t closingCount() const { return closing_.size(); }
  // For the keeper: operations handed to the engine so far, whether some wait in it for room,
  // and its going idle (the next hand-over wakes it again).
  uint64_t handedOverCount() const { return handedOver_; }
  bool engineHoldsWaiting() const { return engine_->holdsWaiting(); }
  void keeperWentIdle() { keeperArmed_ = false; }
  // For the keeper: takes back the writes stranded on a rail whose endpoint failed, once their
  // grace is over (device_endpoint.cc), and posts the probes of down rails that are due; how long
  // until it should look again (0: a probe is in flight), UINT64_MAX when nothing waits.
  uint64_t probeRails();
  // A rail probe ended (RailProbe): error 0, the rail rejoins; else it stays down. A probe of a
  // rail that is up asked whether our NIC or a path beyond it broke (device_paths.cc).
  void onProbeEnded(size_t rail, int error, const char* text);
  // A path probe ended (PathProbe): error 0, the path rejoins; else it stays down.
  void onPathProbeEnded(int index, int error, const char* text);
  // Comms the device holds, open or closing.
  size_t commCount() const { return comms_.size(); }
  ControlChannel& controlChannel() { return *controlChannel_; }
  // Operations of grouped receives, in blocks of maxRecvs (single operations travel inline).
  OpPool& groupOps() { return *groupOps_; }

  // Address vector entry for a peer endpoint on rail `rail`, inserted once per distinct address.
  int peerAddress(const uint8_t* address, size_t length, fi_addr_t* out, size_t rail = 0);

  // Unpredictable 32-bit values for connection tokens (device lock held).
  uint32_t nextNonce() { return static_cast<uint32_t>(nonces_()); }

  // A key for providers that let the application choose registration keys.
  uint64_t nextRegistrationKey() { return nextKey_++; }

 private:
  // tcp and efa may keep a post or an inject (done at once for its caller) until the endpoint is
  // progressed again: behind a send the socket has not taken, or (efa) to send again a packet the
  // target had no buffer for (RNR). The application may never call this device again (its send
  // ended), so the keeper is woken on the first hand-over after it went idle and covers the rest
  // without a lock here.
  void noteHandedOver() {
    ++handedOver_;
    if (!keeperArmed_ && keeper_ != nullptr) {  // null while the device is built or goes
      keeperArmed_ = true;
      keeper_->wake();
    }
  }
  // DeviceSetup: the protocol's set-up lowers the device's largest message.
  void limitMessageBytes(size_t bytes) override;
  // EngineEvents: a peer's write goes to the RMA layer (its mark) or to the protocol.
  void onRemoteWrite(size_t rail, uint64_t data, size_t length) override;
  bool onRemoteWriteError(uint64_t data, const char* why) override;
  void onTransferError(size_t rail, const Operation& op, int error, const char* text) override;
  void onEndpointError(size_t rail, int error, const char* text) override;
  // Rail `rail`'s path is broken (`what`: how it showed): left out of new messages, probed, named
  // in one WARN (an INFO when it fails again after rejoining).
  void railPathBroke(size_t rail, const char* what);
  // The path of `rail` to `peer` broke (device_paths.cc: an operation failed on it, or it went
  // silent): it goes down for the comms to that peer, and our own NIC is asked at once
  // (classifyRail) whether the rail broke as a whole.
  void pathBroke(size_t rail, fi_addr_t peer, const char* what);
  void classifyRail(size_t rail);
  // The same where our NIC is known to work (its read succeeded): the path goes down and is named.
  void pathBrokeBeyondOurNic(size_t rail, fi_addr_t peer, const char* what);
  // The classifying read of rail `rail` ended: our NIC works (the paths broke beyond it: each is
  // named) or not (the rail goes down).
  void onClassified(size_t rail, int error);
  // One WARN for each path of `rail` that broke and was not named yet (an INFO if it broke before).
  void nameBrokenPaths(size_t rail);
  // Every data comm's cached mask of broken paths, after a path changed.
  void refreshPathMasks();
  // Each comm of the net ABI (send and receive comms; not listeners, not the RMA layer's groups).
  // (Failures and probes only: not the data path.)
  void forEachDataComm(const std::function<void(DataComm&)>& visit) const;
  // Path (rail, peer) failed as `what` says: true when it went down now (the comms' masks are
  // refreshed); false when it was down already, or the table is full and the rail went down.
  bool takePathDown(size_t rail, fi_addr_t peer, const char* what);
  // Posts the probes of broken paths that are due; how long until the next is (UINT64_MAX: none).
  uint64_t probePaths(uint64_t now);
  // Whether an open comm goes to `peer` on rail `rail`.
  bool pathInUse(size_t rail, fi_addr_t peer) const;
  // A peer's address on a rail, in hex, for log lines ("?" when unknown).
  std::string peerText(size_t rail, fi_addr_t peer) const;
  // The writes of a rail whose endpoint failed that are still with the provider once the grace
  // is over (efa never completes what it queued behind a failed handshake): their peers'
  // addresses are removed from the rail (which ends them in the provider, silently), each fails
  // as a broken path's write does (the rdma protocol asks and writes it again elsewhere), and the
  // addresses go back fresh. Returns how long until the next is due (UINT64_MAX: none).
  uint64_t releaseStrandedWhenDue(uint64_t now);
  void releaseStranded(size_t rail);
  // The writes still with the provider on `rail` to `peers` (the net comms' and the path probes'):
  // the peers' addresses are removed from the rail (the provider ends what it holds for them
  // without a completion: efa), each write fails as a broken path's write does (`why`), and the
  // addresses go back fresh, for every comm. A peer the provider would not forget keeps its writes
  // (removed from `peers`). Returns how many writes were taken back.
  size_t takeBack(size_t rail, std::vector<fi_addr_t>& peers, const char* why);
  // Every quarter of NCCL_FABRIC_RAIL_TIMEOUT_MS, each send comm of several rails is looked at
  // (core/silence_watch.h): a rail beyond the leader whose writes went silent takes its path down
  // (as a failed write does) and its stuck writes back (device_silence.cc). How long until the
  // next look (UINT64_MAX: nothing is in flight to watch).
  uint64_t lookForSilentPaths(uint64_t now);
  void pathWentSilent(size_t rail, fi_addr_t peer);
  const char* railName(size_t rail) const;
  // The device's speed over `rails` of its rails (NCCL reads it for each new communicator).
  int speedWith(size_t rails) const;
  // The constructor's steps: what the rails' opening refused narrows the device; the scratch
  // area for receives the provider must not truncate; the host buffers it registers.
  void adoptRailVerdict(const DeviceSpec& spec);
  void prepareScratch(const DeviceSpec& spec);
  void registerHostBuffers();
  wire::RailAddresses ownRailAddresses() const;
  uint32_t allocateId();
  // Posts the control receives before the first comm (not at init: NCCL_PROTO is settled by
  // then, and a device NCCL never uses posts nothing). False, logged, when they cannot be.
  bool startControl();
  void reapClosed();
  void destroyComm(Comm& comm);

  int index_;
  const config::Config& config_;
  // First: the lock and the engine outlive everything that may still name them while the
  // device goes (its endpoints close before the comms, in the destructor).
  std::unique_ptr<DeviceRails> rails_;
  OperationEngine* engine_;  // rails_'s
  size_t railCount_;
  wire::RailAddresses railAddresses_{};
  RailHealth railHealth_;
  PathHealth paths_;
  uint32_t classifying_ = 0;  // bit r: rail r's probe asks whether our NIC or a path broke
  // An endpoint error of rail r (efa's failed handshake), for the WARN of the paths it broke.
  char endpointWhat_[memory::kMaxRails][PathHealth::kWhatBytes] = {};
  int fullSpeedMbps_ = 0;            // the speed with every rail up
  uint32_t railErrorsReported_ = 0;  // bit r: rail r's first failure was named (one WARN a rail)
  uint32_t endpointErrorsReported_ = 0;  // bit r: an endpoint error of rail r was named
  // When the writes stranded on rail r are taken back (0: nothing pending), device lock.
  uint64_t strandedDueNs_[memory::kMaxRails] = {};
  uint64_t silenceBoundNs_ = 0;  // NCCL_FABRIC_RAIL_TIMEOUT_MS (0: not watched)
  uint64_t nextSilenceLookNs_ = 0;
  bool silenceWatching_ = false;  // the last look found a write in flight
  std::string provider_;
  bool localOnly_ = false;
  size_t injectLimit_ = 0;
  bool deliversInOrder_ = false;
  std::unique_ptr<protocol::Protocol> protocol_;
  std::unique_ptr<MemoryRegistry> memory_;
  std::unique_ptr<ControlArena> controlArena_;
  RemoteWriteSink* rmaSink_ = nullptr;
  std::unique_ptr<ScratchArea> scratch_;   // before the drains, which receive into it
  MemoryHandle* scratchHandle_ = nullptr;  // its registration, where the provider needs one
  bool roomForReceives_ = false;
  std::unique_ptr<DrainPool> drains_;
  // Declared after everything progress() touches, so that its thread stops first.
  std::unique_ptr<ProgressKeeper> keeper_;
  uint64_t handedOver_ = 0;   // device lock
  bool keeperArmed_ = false;  // device lock: the keeper is active, or being woken
  bool ll128Ok_ = true;
  const memory::CudaDriver* cuda_ = nullptr;
  bool rmaRead_ = false;
  memory::FlushSetting flushSetting_;
  uint64_t flushWord_ = 0;
  MemoryHandle* flushWordHandle_ = nullptr;
  std::unique_ptr<RailProbe> railProbe_;  // null: a rail that goes down stays down
  std::unique_ptr<PathProbe> pathProbe_;  // with railProbe_: broken paths' probes
  fi_addr_t selfAddresses_[memory::kMaxRails] = {FI_ADDR_UNSPEC, FI_ADDR_UNSPEC, FI_ADDR_UNSPEC,
                                                 FI_ADDR_UNSPEC};
  DeviceProperties properties_;
  std::vector<std::string> railNames_;
  std::vector<std::string> gpus_;
  std::unique_ptr<ControlChannel> controlChannel_;
  std::unique_ptr<OpPool> groupOps_;
  bool controlStarted_ = false;
  std::unordered_map<uint32_t, std::unique_ptr<Comm>> comms_;
  Comm* lastFound_ = nullptr;  // findComm's last answer (cleared when that comm goes)
  std::vector<Comm*> closing_;
  size_t reapCursor_ = 0;  // where reapClosed() goes on
  uint32_t nextId_ = 1;
  uint64_t nextKey_ = 1;
  std::mt19937_64 nonces_{std::random_device{}()};
  std::map<std::pair<size_t, std::vector<uint8_t>>, fi_addr_t> peers_;  // (rail, address)
};

}  // namespace nnf::core
