// An in-memory fabric for unit tests: real core::Devices, comms and protocols run over it in one
// process, with no provider underneath. Each device gets FakeRails (core::DeviceRails): rails
// described from memory (FakeRail), a registrar that hands out keys and checks every access
// against them (FakeRegistrar, support/fake_rails.h), and a FakeEngine (core::OperationEngine,
// support/fake_engine.h). The fabric moves what the engines post:
//   - an RMA write is a memcpy into the target's registered memory (key, rail, range and access
//     checked), then the remote completion with its immediate data (cut to the target rail's
//     cq_data_size) at the target; a read is a memcpy out of the target's memory;
//   - untagged (control) messages go to the peer's posted untagged receives, tagged ones to its
//     matching tagged receives (unexpected ones wait, copied, for their receive; a receive too
//     short fails with FI_ETRUNC); an unmatched receive can be cancelled;
//   - an inject completes at once, its delivery still to come;
//   - seeded, every delivery lands a random number of ticks after its post and every local
//     completion comes a random number of ticks after that (or, for some writes and sends,
//     before their data lands: copied at the post, as tcp's socket takes them); where the fabric
//     models an in-order provider (FakeFabricOptions::inOrder: shm, tcp) the deliveries of one
//     source rail to one target rail keep their posting order, else (SRD) any order goes;
//     nothing is dropped or duplicated;
//   - some posts are held back as by a full provider queue (FakeFabricOptions::holdOneIn) and
//     posted later in order (op.queued meanwhile, as with the real engine);
//   - optionally every post and inject leaves only at its source's next progress (tcp, efa:
//     FakeFabricOptions::departWithSourceProgress);
//   - a rail may fail (FakeFabric::failRail, on every device at once, as a NIC plane): what lands
//     from then on over it does not land (or, one in `landedOneIn`, lands with its acknowledgement
//     lost, and the target reads it at its next progress, after what is queued already: after a
//     message that came later on the leader) and completes with efa's FI_ECONNABORTED, as SRD
//     reports an unresponsive remote; reads too (the devices' rail probes). It may come back
//     (FakeFabric::restoreRail). One device's NIC of a rail may fail alone (FakeFabric::failNic:
//     a peer's NIC, as the other devices see it), with the same effects on what it sends or is
//     sent, while the other devices' reads of themselves still work.
//   - a NIC may go silent instead (FakeFabric::silenceNic): what goes through it neither lands nor
//     completes (or lands with its completion withheld) until its source removes the target's
//     address (dropped, as efa drops what it holds for a removed peer) or the NIC is restored
//     (it lands then, late).
// A tick is one progress() call of any engine on the fabric: landings need no progress of the
// target (as on an RDMA NIC); its completions wait in its queue until it progresses. Every misuse
// detected (an unknown key, a range outside its registration, a missing descriptor where the
// rail needs one, an address never inserted) fails the test (ADD_FAILURE).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <random>
#include <unordered_map>
#include <vector>

#include "core/device_rails.h"
#include "support/fake_engine.h"
#include "support/fake_rails.h"

namespace nnf::test {

struct FakeFabricOptions {
  uint64_t seed = 1;
  bool inOrder = false;          // deliveries keep their order per (source rail, target rail)
  uint32_t maxDelay = 3;         // ticks a delivery or a completion waits: 0..maxDelay
  uint32_t longDelayOneIn = 16;  // one in this many waits up to longDelay instead (0: never)
  uint32_t longDelay = 40;
  uint32_t earlyCompletionOneIn = 8;  // posted writes and sends completed before they land
  uint32_t holdOneIn = 0;             // posts held back as by a full queue (0: never)
  // Every post and inject leaves its source only at the source engine's next progress, as tcp
  // queues one behind a send the socket has not taken and efa sends again one the target had no
  // buffer for (RNR): a sender that is never progressed again keeps it (what the device's keeper
  // must cover).
  bool departWithSourceProgress = false;
  // The fabric's clock (FakeEngine::nowNs, what the protocols' quiet times and late descriptions
  // read): every tick moves it 1..tickNs; one tick in pauseOneIn moves it pauseNs..2 * pauseNs
  // instead, as when a process is descheduled (0: never). Drawn from its own generator, so the
  // deliveries' draws stay those of the seed.
  uint64_t tickNs = 1000;
  // A write that a failed rail lands all the same is read by its target right after the next
  // untagged message it receives (the sender's question about it), or 64 progress calls later:
  // the receiver answers before it sees what landed (where it read the question on the leader
  // and the write on its rail only at its next progress call).
  bool failedLandedAfterQuestion = false;
  uint32_t pauseOneIn = 4096;
  uint64_t pauseNs = 1000000;
};

// What the fabric counts, for tests that must show a path was taken.
struct FakeStats {
  uint64_t writes = 0;    // RMA writes landed (posted and injected)
  uint64_t injects = 0;   // injected writes and sends
  uint64_t messages = 0;  // tagged and untagged messages delivered
  uint64_t reads = 0;
  uint64_t held = 0;       // posts held back
  uint64_t early = 0;      // local completions before the data landed
  uint64_t reordered = 0;  // deliveries that overtook an earlier post on the same rails
  uint64_t cancelled = 0;
  uint64_t truncated = 0;        // messages longer than their receive
  uint64_t pauses = 0;           // ticks that moved the clock by a pause
  uint64_t departedLate = 0;     // transfers that waited for their source's progress to leave
  uint64_t failed = 0;           // transfers failed by a rail that went down (failRail)
  uint64_t failedLanded = 0;     // of those, the ones that landed all the same
  uint64_t failedReads = 0;      // of those, reads (the devices' rail probes)
  uint64_t failedAgain = 0;      // of those, writes that went again after an earlier failure
  uint64_t withheld = 0;         // transfers a silent NIC withheld (silenceNic)
  uint64_t withheldLanded = 0;   // of those, the ones that landed (their completion withheld)
  uint64_t withheldDropped = 0;  // of those, the ones their source took back (removeAddress)
  uint64_t writesByRail[memory::kMaxRails] = {};  // writes landed, by the rail they left on
  uint64_t restoredAtNs = 0;              // the clock when a rail last came back (restoreRail)
  uint64_t firstWriteAfterRestoreNs = 0;  // the first write that left on it after that
};

class FakeFabric;

// What core::Device runs over: a device's rails, registrations and engine on the fabric.
class FakeRails final : public core::DeviceRails {
 public:
  FakeRails(FakeFabric& fabric, size_t id, const FakeRailSpec& spec, size_t rails);
  ~FakeRails() override;

  size_t railCount() const override { return rails_.size(); }
  const fabric::RailAttributes& rail(size_t index) const override { return *rails_[index]; }
  int insertAddress(size_t rail, const uint8_t* address, size_t length, fi_addr_t* out) override {
    return engine_->insertAddress(rail, address, length, out);
  }
  int removeAddress(size_t rail, fi_addr_t address) override;
  // The fabric drops what it withholds for a removed peer and never reports it (efa from 2.3).
  bool takesBackPostedWritesSafely() const override { return true; }
  core::OperationEngine& engine() override { return *engine_; }
  memory::Registrar& leaderRegistrar() override { return leader_; }
  memory::Registrar& dataRegistrar() override { return data_; }
  core::RailVerdict verdict() const override { return {}; }
  void close() override {}
  FakeEngine& fakeEngine() { return *engine_; }

 private:
  FakeFabric& fabric_;
  std::vector<std::unique_ptr<FakeRail>> rails_;
  FakeKeys keys_;
  FakeRegistrar leader_;
  FakeRegistrar data_;
  std::unique_ptr<FakeEngine> engine_;
};

class FakeFabric {
 public:
  explicit FakeFabric(const FakeFabricOptions& options);
  FakeFabric(const FakeFabric&) = delete;
  FakeFabric& operator=(const FakeFabric&) = delete;

  // The rails of one more device (its engine's id: the number of devices opened before it).
  std::unique_ptr<FakeRails> open(const FakeRailSpec& spec, size_t rails);
  FakeEngine& engine(size_t id) { return *engines_.at(id); }
  const FakeStats& stats() const { return stats_; }
  // Whether a write that went again after an earlier failure is on its way over rail `rail` (one
  // whose immediate data `which` accepts, where given).
  bool writtenAgainInFlight(size_t rail,
                            const std::function<bool(uint64_t data)>& which = nullptr) const;
  // Called with every write that lands (immediate data as the target reads it, bytes): tests
  // classify them.
  void onWrite(std::function<void(uint64_t data, size_t length)> observer) {
    writeObserver_ = std::move(observer);
  }
  // Called with the immediate data of every write a failed rail fails (landed or not).
  void onFailedWrite(std::function<void(uint64_t data)> observer) {
    failedWriteObserver_ = std::move(observer);
  }
  // While set, every progress of engine `id` first runs `pump` once (never nested): a test that
  // blocks in one device (a close) lets the other device's own threads run meanwhile.
  void setPump(size_t id, std::function<void()> pump) { pumps_.at(id) = std::move(pump); }
  // Rail `rail` of every device goes down: posted transfers that land from now on over it (from
  // or to it) fail; one in `landedOneIn` lands all the same (0: none), its failure reported.
  // Injects are left alone (a test fails rails that carry only posted writes and reads).
  void failRail(size_t rail, uint32_t landedOneIn) {
    downRails_ |= 1u << rail;
    landedOneIn_ = landedOneIn;
  }
  // Rail `rail` of engine `engine` alone goes down (one device's NIC: a peer's NIC as the other
  // devices see it): what lands from now on from or to it fails as above; a read of the other
  // devices from themselves still works.
  void failNic(size_t engine, size_t rail, uint32_t landedOneIn) {
    if (downNics_.size() <= engine) downNics_.resize(engine + 1, 0);
    downNics_[engine] |= 1u << rail;
    landedOneIn_ = landedOneIn;
  }
  // Rail `rail` of engine `engine` goes silent (a NIC reset, a link that drops everything with
  // no error to report): what would land from now on from or to it neither lands nor completes
  // (one in `landedOneIn` lands, its completion withheld) until its source removes the target's
  // address from the rail (the provider then drops it without a completion, as efa does) or the
  // NIC is restored (what is still withheld then lands, late, and completes).
  void silenceNic(size_t engine, size_t rail, uint32_t landedOneIn) {
    if (silentNics_.size() <= engine) silentNics_.resize(engine + 1, 0);
    silentNics_[engine] |= 1u << rail;
    landedOneIn_ = landedOneIn;
  }
  void restoreNic(size_t engine, size_t rail);
  // Rail `rail` works again: what lands over it from now on lands.
  void restoreRail(size_t rail) {
    downRails_ &= ~(1u << rail);
    restoredRail_ = static_cast<int>(rail);
    stats_.restoredAtNs = clockNs_;
    stats_.firstWriteAfterRestoreNs = 0;
  }

  // --- for the engines ---

  enum class Kind : uint8_t { kWrite, kSend, kControlSend, kRead };
  FakeEngine* engineAt(size_t id) const { return id < engines_.size() ? engines_[id] : nullptr; }
  uint64_t draw() { return random_(); }
  uint64_t nowNs() const { return clockNs_; }
  // Time passes with nothing on the fabric moving (a test where only the keepers run).
  void advanceClockBy(uint64_t ns) { clockNs_ += ns; }
  // Whether this post waits, held back as by a full queue.
  bool holdPost();
  // Moves `op` (posted: op.inFlight; else injected) from `source` to the peer it names (at the
  // source's next tick with FakeFabricOptions::departWithSourceProgress).
  void transmit(FakeEngine& source, const core::Operation& op, Kind kind);
  // Puts a message that waits at `target` for its receive into `receive`: false when none does.
  bool deliverWaiting(FakeEngine& target, core::Operation& receive);
  // One tick: what `engine` sent since its last tick departs, what is due lands or completes,
  // then the engine's pump runs.
  void tick(FakeEngine& engine);
  // Operations of `engine` whose local completion is still owed.
  void forEachOwed(const FakeEngine& engine,
                   const std::function<void(const core::Operation&)>& visit) const;
  void noteCancelled() { ++stats_.cancelled; }
  // `source` removed address `target` from rail `rail`: what it sent there and a silent NIC
  // withholds is dropped, never completed.
  void dropWithheld(const FakeEngine& source, size_t rail, const FakeEngine::Peer& target);
  // The engine is going: what it posted or was sent is dropped, never touched again.
  void forget(FakeEngine& engine);

 private:
  struct Transfer {
    Kind kind = Kind::kWrite;
    bool injected = false;
    bool landed = false;
    bool delivered = false;  // in its receive (a message may wait for one after landing)
    bool owes = false;       // a local completion is owed to `op` and not queued yet
    bool scheduled = false;  // that completion has its event
    bool dead = false;       // its source or target went: dropped, never touched again
    bool failed = false;     // a rail it took went down before it landed (failRail)
    bool withheld = false;   // a silent NIC holds it (silenceNic): not landed, or not completed
    bool landedSilently = false;  // withheld after landing: only its completion is
    uint32_t events = 0;          // its events still in the queue
    uint64_t postOrder = 0;       // when it was posted (or injected), fabric-wide
    uint8_t sourceRail = 0;
    uint8_t targetRail = 0;
    FakeEngine* source = nullptr;
    FakeEngine* target = nullptr;
    core::Operation* op = nullptr;  // null once completed, and for injects
    uint64_t data = 0;              // immediate data, or the tag
    uint64_t remoteAddress = 0;
    uint64_t key = 0;
    size_t length = 0;            // bytes moved (header included)
    std::vector<uint8_t> staged;  // the bytes, where copied at the post (capacity kept)
    bool isStaged = false;
  };
  struct Event {
    uint64_t time;
    uint64_t order;
    uint32_t transfer;
    bool land;  // else: the local completion
    bool operator>(const Event& other) const {
      return time != other.time ? time > other.time : order > other.order;
    }
  };
  // Per (source, target, source rail, target rail): the latest landing time given (in-order mode
  // keeps them in posting order) and the latest post that landed.
  struct Lane {
    uint64_t lastLanding = 0;
    uint64_t lastLandedPost = 0;
  };

  uint32_t delay();
  void advanceClock();
  uint32_t newTransfer(FakeEngine& source, const core::Operation& op, Kind kind);
  void stage(Transfer& transfer);
  void schedule(uint32_t index);
  void scheduleCompletion(uint32_t index);
  void land(uint32_t index);
  bool nicDown(const FakeEngine* engine, size_t rail) const;
  bool nicSilent(const FakeEngine* engine, size_t rail) const;
  void finish(uint32_t index);
  void release(uint32_t index);
  void landWrite(Transfer& transfer);
  void landRead(Transfer& transfer);
  void landMessage(uint32_t index);
  void deliver(uint32_t index, core::Operation& receive);
  // Copies `length` bytes of what `transfer` carries from `offset` on (header first).
  void copyOut(const Transfer& transfer, size_t offset, uint8_t* to, size_t length) const;
  static uint64_t laneKey(const Transfer& transfer);

  FakeFabricOptions options_;
  std::mt19937_64 random_;
  uint64_t now_ = 0;  // in ticks
  std::mt19937_64 clockRandom_;
  uint64_t clockNs_ = 1000000000;  // from 1 s: 0 means "not stamped" to the comms
  uint64_t order_ = 0;
  std::vector<FakeEngine*> engines_;
  std::vector<Transfer> transfers_;
  std::vector<uint32_t> free_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::unordered_map<uint64_t, Lane> lanes_;
  // Messages landed before their receive: transfer indices per target engine, in arrival order.
  std::vector<std::vector<uint32_t>> unexpected_;
  // Transfers posted or injected since their source's last tick (departWithSourceProgress).
  std::vector<std::vector<uint32_t>> departing_;
  std::vector<std::function<void()>> pumps_;
  bool pumping_ = false;
  std::function<void(uint64_t, size_t)> writeObserver_;
  std::function<void(uint64_t)> failedWriteObserver_;
  uint32_t downRails_ = 0;            // bit r: rail r failed (failRail)
  std::vector<uint32_t> downNics_;    // per engine id, bit r: its rail r failed (failNic)
  std::vector<uint32_t> silentNics_;  // per engine id, bit r: its rail r is silent (silenceNic)
  std::vector<uint32_t> withheld_;    // transfers a silent NIC withholds
  int restoredRail_ = -1;             // the rail restoreRail brought back last
  uint32_t landedOneIn_ = 0;
  FakeStats stats_;
};

}  // namespace nnf::test
