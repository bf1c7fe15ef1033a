// The in-memory fabric's operation engine (support/fake_fabric.h): one per device, what
// core::Device posts through. It keeps the device's posted receives and its completion queue; the
// fabric moves what it sends and decides when each delivery and completion comes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/op_queue.h"
#include "core/operation_engine.h"
#include "support/fake_rails.h"

namespace nnf::test {

class FakeFabric;

class FakeEngine final : public core::OperationEngine {
 public:
  FakeEngine(FakeFabric& fabric, size_t id, std::vector<const FakeRail*> rails, FakeKeys& keys,
             const FakeRailSpec& spec);
  ~FakeEngine() override;
  FakeEngine(const FakeEngine&) = delete;
  FakeEngine& operator=(const FakeEngine&) = delete;

  abi::Result post(core::Operation& op) override;
  abi::Result inject(const core::Operation& op) override;
  void cancel(core::Operation& op) override;
  void unqueue(core::Operation& op) override;
  // An operation taken back (its peer's address removed: the fabric drops what a silent NIC
  // withholds for it, FakeFabric::dropWithheld) ends here, with no completion.
  void release(core::Operation& op) override { op.inFlight = false; }
  abi::Result progress(core::EngineEvents& events) override;
  bool holdsWaiting() const override { return !heldRx_.empty() || !heldTx_.empty(); }
  size_t injectLimit() const override { return spec_.injectSize; }
  bool deliversInOrder() const override { return spec_.deliversInOrder; }
  void setReceiveRoom(core::ScratchArea* room) override { room_ = room; }
  uint64_t nowNs() const override;

  size_t id() const { return id_; }
  const FakeKeys& keys() const { return keys_; }
  int insertAddress(size_t rail, const uint8_t* address, size_t length, fi_addr_t* out);
  // Every operation the engine holds for its device (posted receives, posts held back, sends and
  // writes not yet completed, completions not yet read), for tests that check whose are left.
  void forEachHeld(const std::function<void(const core::Operation&)>& visit) const;

  // --- for the fabric ---

  struct Peer {
    FakeEngine* engine = nullptr;
    size_t rail = 0;
  };
  // Whom address `address` of rail `rail` names (engine null: no such address).
  Peer peer(size_t rail, fi_addr_t address) const;
  size_t immediateBytes() const { return spec_.cqDataSize; }
  core::ScratchArea* room() const { return room_; }
  // The first posted receive a message (tagged, with `tag`, or untagged) matches, taken out of
  // the posted list; null when none.
  core::Operation* takeReceive(bool tagged, uint64_t tag);
  // Queues a completion for the device to read at its next progress().
  void complete(core::Operation* op, size_t length, int error, size_t overflow);
  void remoteWrite(size_t rail, uint64_t data, size_t length);
  // The same, read only at this engine's `progresses`-th progress from now: as a real device
  // reads its rails' queues one after the other, a write landed on one rail may be read after a
  // message that arrived later on another (the fabric uses it for writes landed on a rail that
  // failed).
  // `afterMessage`: or sooner, right after the next untagged message this engine receives (the
  // sender's question about it, read first).
  void remoteWriteLater(size_t rail, uint64_t data, size_t length, uint32_t progresses,
                        bool afterMessage = false);

 private:
  struct Completion {
    enum class Kind : uint8_t { kOp, kRemote } kind = Kind::kOp;
    uint8_t rail = 0;
    int error = 0;
    core::Operation* op = nullptr;
    size_t length = 0;
    size_t overflow = 0;
    uint64_t data = 0;
  };
  void start(core::Operation& op);
  bool checkLocal(const core::Operation& op, const void* buffer, size_t length, const char* what);
  void releaseHeld();

  FakeFabric& fabric_;
  size_t id_;
  std::vector<const FakeRail*> rails_;
  FakeKeys& keys_;
  FakeRailSpec spec_;
  core::ScratchArea* room_ = nullptr;
  std::vector<std::vector<Peer>> addresses_;  // per rail: fi_addr_t -> peer endpoint
  std::vector<core::Operation*> tagged_;      // posted tagged receives, in order
  std::vector<core::Operation*> untagged_;    // posted untagged receives, in order
  std::vector<Completion> cq_;
  size_t head_ = 0;  // the next completion progress() reads
  struct Later {
    Completion completion;
    uint32_t progresses;
    bool afterMessage;
  };
  std::vector<Later> later_;  // remoteWriteLater's, until they are due
  // Moves the entries of later_ that `due` says are due (it may count them down) to the queue.
  void releaseLaterWhere(bool (*due)(Later&));
  core::OpQueue heldRx_;
  core::OpQueue heldTx_;
};

}  // namespace nnf::test
