// The operation engine over libfabric: posts each operation on its rail's endpoint, counts what
// each direction has with the provider (Lane: posted, limit, waiting), keeps in the plugin what
// the provider's queue cannot take yet (-FI_EAGAIN, or the device's share in use) and posts it as
// completions make room, and reads every rail's completion queue: an operation's completion goes
// to its owner, a peer's write to the device (EngineEvents). Nothing here allocates once built.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/op_queue.h"
#include "core/operation_engine.h"
#include "fabric/rail.h"

namespace nnf::core {

class FabricEngine final : public OperationEngine {
 public:
  struct Settings {
    int deviceIndex = 0;
    std::string deviceName;
    std::vector<std::string> railNames;  // for log lines, per rail
    size_t cqReadCount = 32;             // completions read at once (NCCL_FABRIC_CQ_READ_COUNT)
    size_t injectLimit = 0;              // 0: no inject (NCCL_FABRIC_INJECT=0)
    bool deliversInOrder = false;
  };
  // `rails` (leader first) outlive the engine; the queue limits come from the leader's
  // rx_attr / tx_attr sizes.
  FabricEngine(std::vector<fabric::Rail*> rails, Settings settings);
  FabricEngine(const FabricEngine&) = delete;
  FabricEngine& operator=(const FabricEngine&) = delete;

  abi::Result post(Operation& op) override;
  abi::Result inject(const Operation& op) override;
  void cancel(Operation& op) override { rails_[op.rail]->cancel(&op.context); }
  void unqueue(Operation& op) override { laneOf(op).waiting.remove(op); }
  void release(Operation& op) override {
    op.inFlight = false;
    --laneOf(op).posted;
  }
  abi::Result progress(EngineEvents& events) override;
  bool holdsWaiting() const override { return !rx_.waiting.empty() || !tx_.waiting.empty(); }
  size_t injectLimit() const override { return settings_.injectLimit; }
  bool deliversInOrder() const override { return settings_.deliversInOrder; }
  void setReceiveRoom(ScratchArea* room) override { room_ = room; }
  uint64_t nowNs() const override { return core::nowNs(); }

 private:
  // Operations of one direction: posted count, the provider's limit, and those waiting.
  struct Lane {
    explicit Lane(const char* laneName) : name(laneName) {}
    const char* name;  // "receive" or "transmit"
    size_t posted = 0;
    size_t limit = 0;
    OpQueue waiting;
    uint64_t fullSinceNs = 0;  // waiting for a slot since then (0: not waiting)
    bool warned = false;
  };
  Lane& laneOf(const Operation& op) {
    return op.type == OpType::kRecv || op.type == OpType::kControlRecv ? rx_ : tx_;
  }
  void setLimits(const fi_info* leader);
  abi::Result postNow(Operation& op, ssize_t* ret);
  // Maps a post's return value: success, kInProgress for -FI_EAGAIN, else one WARN.
  abi::Result postResult(const Operation& op, ssize_t ret) const;
  void retryQueued(Lane& lane, EngineEvents& events);
  void checkWaiting(Lane& lane);
  abi::Result readRail(size_t index, EngineEvents& events);
  void dispatchError(size_t railIndex, EngineEvents& events);
  // Reads the rails' event queues (where the provider has them) every kEventCheckInterval
  // progress calls: handshake failures are reported there, seldom.
  void checkEvents(EngineEvents& events);
  const char* railName(size_t index) const {
    return index < settings_.railNames.size() ? settings_.railNames[index].c_str() : "?";
  }

  static constexpr uint32_t kEventCheckInterval = 4096;
  std::vector<fabric::Rail*> rails_;
  Settings settings_;
  ScratchArea* room_ = nullptr;
  std::vector<fi_cq_tagged_entry> completions_;
  Lane rx_{"receive"};  // NOLINT: named lanes
  Lane tx_{"transmit"};
  uint32_t eventCheckCountdown_ = kEventCheckInterval;
  bool unattributedErrorReported_ = false;
};

}  // namespace nnf::core
