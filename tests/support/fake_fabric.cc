#include "support/fake_fabric.h"

#include <rdma/fi_errno.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/scratch_area.h"

namespace nnf::test {
namespace {
uint64_t immediateMask(size_t bytes) {
  return bytes >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * bytes)) - 1;
}
}  // namespace

FakeRails::FakeRails(FakeFabric& fabric, size_t id, const FakeRailSpec& spec, size_t rails)
    : fabric_(fabric), leader_(keys_, 1), data_(keys_, rails) {
  std::vector<const FakeRail*> views;
  for (size_t r = 0; r < rails; ++r) {
    rails_.push_back(std::make_unique<FakeRail>(spec, fakeAddress(id, r)));
    views.push_back(rails_.back().get());
  }
  engine_ = std::make_unique<FakeEngine>(fabric, id, std::move(views), keys_, spec);
}

FakeRails::~FakeRails() = default;

int FakeRails::removeAddress(size_t rail, fi_addr_t address) {
  fabric_.dropWithheld(*engine_, rail, engine_->peer(rail, address));
  return 0;
}

FakeFabric::FakeFabric(const FakeFabricOptions& options)
    : options_(options), random_(options.seed), clockRandom_(options.seed ^ 0x636c6f636bull) {
  transfers_.reserve(4096);
  free_.reserve(4096);
}

std::unique_ptr<FakeRails> FakeFabric::open(const FakeRailSpec& spec, size_t rails) {
  size_t id = engines_.size();
  auto opened = std::make_unique<FakeRails>(*this, id, spec, rails);
  engines_.push_back(&opened->fakeEngine());
  unexpected_.emplace_back();
  departing_.emplace_back();
  pumps_.emplace_back();
  return opened;
}

bool FakeFabric::holdPost() {
  if (options_.holdOneIn == 0 || random_() % options_.holdOneIn != 0) return false;
  ++stats_.held;
  return true;
}

uint32_t FakeFabric::delay() {
  uint64_t draw = random_();
  if (options_.longDelayOneIn != 0 && (draw >> 32) % options_.longDelayOneIn == 0) {
    return static_cast<uint32_t>(draw % (options_.longDelay + 1));
  }
  return static_cast<uint32_t>(draw % (options_.maxDelay + 1));
}

void FakeFabric::transmit(FakeEngine& source, const core::Operation& op, Kind kind) {
  uint32_t index = newTransfer(source, op, kind);
  if (options_.departWithSourceProgress) {
    departing_[source.id()].push_back(index);
    return;
  }
  schedule(index);
}

uint32_t FakeFabric::newTransfer(FakeEngine& source, const core::Operation& op, Kind kind) {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<uint32_t>(transfers_.size());
    transfers_.emplace_back();
  }
  Transfer& transfer = transfers_[index];
  // The staging buffer keeps its capacity: a steady run allocates nothing here.
  std::vector<uint8_t> staged = std::move(transfer.staged);
  transfer = Transfer{};
  transfer.staged = std::move(staged);
  transfer.kind = kind;
  transfer.sourceRail = op.rail;
  transfer.source = &source;
  transfer.data = op.tag;
  transfer.remoteAddress = op.remoteAddress;
  transfer.key = op.remoteKey;
  transfer.length = (kind == Kind::kWrite ? op.headerLength : 0) + op.length;
  transfer.postOrder = ++order_;
  transfer.op = const_cast<core::Operation*>(&op);
  FakeEngine::Peer peer = source.peer(op.rail, op.peer);
  if (peer.engine == nullptr) {
    ADD_FAILURE() << "device " << source.id() << ": a " << core::opTypeName(op.type)
                  << " to address " << op.peer << ", which rail " << int{op.rail}
                  << " never inserted";
    transfer.dead = true;
    transfer.op = nullptr;
    return index;
  }
  transfer.target = peer.engine;
  transfer.targetRail = static_cast<uint8_t>(peer.rail);
  if (!op.inFlight) {
    // Injected: copied now, no completion owed.
    transfer.injected = true;
    ++stats_.injects;
    stage(transfer);
    transfer.op = nullptr;
    return index;
  }
  transfer.owes = true;
  // Some writes and sends complete before they land, their bytes copied now.
  if (kind != Kind::kRead && options_.earlyCompletionOneIn != 0 &&
      random_() % options_.earlyCompletionOneIn == 0) {
    ++stats_.early;
    stage(transfer);
    scheduleCompletion(index);
  }
  return index;
}

void FakeFabric::stage(Transfer& transfer) {
  transfer.staged.resize(transfer.length);
  copyOut(transfer, 0, transfer.staged.data(), transfer.length);
  transfer.isStaged = true;
}

void FakeFabric::copyOut(const Transfer& transfer, size_t offset, uint8_t* to,
                         size_t length) const {
  if (length == 0) return;
  if (transfer.isStaged) {
    memcpy(to, transfer.staged.data() + offset, length);
    return;
  }
  const core::Operation& op = *transfer.op;
  size_t header = transfer.kind == Kind::kWrite ? op.headerLength : 0;
  if (offset < header) {
    size_t part = std::min(length, header - offset);
    memcpy(to, static_cast<const uint8_t*>(op.header) + offset, part);
    to += part;
    offset += part;
    length -= part;
  }
  if (length != 0) memcpy(to, static_cast<const uint8_t*>(op.buffer) + (offset - header), length);
}

uint64_t FakeFabric::laneKey(const Transfer& transfer) {
  return (uint64_t{transfer.source->id()} << 24) | (uint64_t{transfer.target->id()} << 16) |
         (uint64_t{transfer.sourceRail} << 8) | transfer.targetRail;
}

void FakeFabric::schedule(uint32_t index) {
  Transfer& transfer = transfers_[index];
  uint64_t time = now_ + delay();
  uint64_t order = random_();
  if (!transfer.dead && options_.inOrder) {
    Lane& lane = lanes_[laneKey(transfer)];
    time = std::max(time, lane.lastLanding);
    lane.lastLanding = time;
    order = transfer.postOrder;  // ties land in posting order
  }
  ++transfer.events;
  events_.push(Event{time, order, index, true});
}

void FakeFabric::scheduleCompletion(uint32_t index) {
  Transfer& transfer = transfers_[index];
  transfer.scheduled = true;
  ++transfer.events;
  events_.push(Event{now_ + delay(), random_(), index, false});
}

void FakeFabric::tick(FakeEngine& engine) {
  ++now_;
  advanceClock();
  std::vector<uint32_t>& departing = departing_[engine.id()];
  for (uint32_t index : departing) {
    ++stats_.departedLate;
    schedule(index);
  }
  departing.clear();
  while (!events_.empty() && events_.top().time <= now_) {
    Event event = events_.top();
    events_.pop();
    --transfers_[event.transfer].events;
    if (event.land) {
      land(event.transfer);
    } else {
      finish(event.transfer);
    }
    release(event.transfer);
  }
  std::function<void()>& pump = pumps_[engine.id()];
  if (pump && !pumping_) {
    pumping_ = true;
    pump();
    pumping_ = false;
  }
}

bool FakeFabric::writtenAgainInFlight(size_t rail,
                                      const std::function<bool(uint64_t data)>& which) const {
  for (const Transfer& transfer : transfers_) {
    if (transfer.kind == Kind::kWrite && !transfer.landed && !transfer.dead &&
        transfer.op != nullptr && transfer.sourceRail == rail && transfer.op->segment.resent != 0 &&
        (!which || which(transfer.op->tag))) {
      return true;
    }
  }
  return false;
}

void FakeFabric::advanceClock() {
  if (options_.pauseOneIn != 0 && clockRandom_() % options_.pauseOneIn == 0) {
    clockNs_ += options_.pauseNs + clockRandom_() % (options_.pauseNs + 1);
    ++stats_.pauses;
    return;
  }
  clockNs_ += 1 + clockRandom_() % std::max<uint64_t>(options_.tickNs, 1);
}

bool FakeFabric::nicDown(const FakeEngine* engine, size_t rail) const {
  return engine != nullptr && engine->id() < downNics_.size() &&
         (downNics_[engine->id()] >> rail & 1u) != 0;
}

bool FakeFabric::nicSilent(const FakeEngine* engine, size_t rail) const {
  return engine != nullptr && engine->id() < silentNics_.size() &&
         (silentNics_[engine->id()] >> rail & 1u) != 0;
}

void FakeFabric::restoreNic(size_t engine, size_t rail) {
  if (engine < downNics_.size()) downNics_[engine] &= ~(1u << rail);
  if (engine >= silentNics_.size() || (silentNics_[engine] >> rail & 1u) == 0) return;
  silentNics_[engine] &= ~(1u << rail);
  std::vector<uint32_t> still;
  for (uint32_t index : withheld_) {
    Transfer& transfer = transfers_[index];
    if (nicSilent(transfer.source, transfer.sourceRail) ||
        nicSilent(transfer.target, transfer.targetRail)) {
      still.push_back(index);
      continue;
    }
    transfer.withheld = false;
    if (transfer.landedSilently) {
      scheduleCompletion(index);
    } else {
      land(index);  // late, as a NIC that comes back delivers what it still had
    }
  }
  withheld_.swap(still);
}

void FakeFabric::dropWithheld(const FakeEngine& source, size_t rail,
                              const FakeEngine::Peer& target) {
  std::vector<uint32_t> still;
  for (uint32_t index : withheld_) {
    Transfer& transfer = transfers_[index];
    if (transfer.source != &source || transfer.sourceRail != rail ||
        transfer.target != target.engine || transfer.targetRail != target.rail) {
      still.push_back(index);
      continue;
    }
    ++stats_.withheldDropped;
    transfer.withheld = false;
    transfer.dead = true;
    transfer.owes = false;
    transfer.op = nullptr;
    transfer.landed = true;
    transfer.delivered = true;
    release(index);
  }
  withheld_.swap(still);
}

void FakeFabric::land(uint32_t index) {
  Transfer& transfer = transfers_[index];
  if (!transfer.dead && transfer.owes &&
      (nicSilent(transfer.source, transfer.sourceRail) ||
       nicSilent(transfer.target, transfer.targetRail))) {
    ++stats_.withheld;
    transfer.withheld = true;
    withheld_.push_back(index);
    if (landedOneIn_ == 0 || random_() % landedOneIn_ != 0) return;  // lands nowhere, for now
    ++stats_.withheldLanded;
    transfer.landedSilently = true;
  }
  transfer.landed = true;
  if (transfer.dead) {
    transfer.delivered = true;
    return;
  }
  if (transfer.owes &&
      (((downRails_ >> transfer.sourceRail | downRails_ >> transfer.targetRail) & 1u) != 0 ||
       nicDown(transfer.source, transfer.sourceRail) ||
       nicDown(transfer.target, transfer.targetRail))) {
    transfer.failed = true;
    ++stats_.failed;
    if (transfer.kind == Kind::kRead) ++stats_.failedReads;
    if (transfer.op != nullptr && transfer.op->segment.resent != 0) ++stats_.failedAgain;
    if (transfer.kind == Kind::kWrite && failedWriteObserver_) failedWriteObserver_(transfer.data);
    if (landedOneIn_ == 0 || random_() % landedOneIn_ != 0) {
      transfer.delivered = true;  // lands nowhere
      if (!transfer.scheduled) scheduleCompletion(index);
      return;
    }
    ++stats_.failedLanded;  // lands, and its acknowledgement is lost
  }
  Lane& lane = lanes_[laneKey(transfer)];
  if (transfer.postOrder < lane.lastLandedPost) {
    ++stats_.reordered;
    if (options_.inOrder) ADD_FAILURE() << "the in-order fabric reordered a delivery";
  }
  lane.lastLandedPost = std::max(lane.lastLandedPost, transfer.postOrder);
  switch (transfer.kind) {
    case Kind::kWrite:
      landWrite(transfer);
      break;
    case Kind::kRead:
      landRead(transfer);
      break;
    case Kind::kSend:
    case Kind::kControlSend:
      landMessage(index);
      break;
  }
  if (transfer.owes && !transfer.scheduled && !transfer.withheld) scheduleCompletion(index);
}

void FakeFabric::finish(uint32_t index) {
  Transfer& transfer = transfers_[index];
  if (!transfer.dead) {
    transfer.source->complete(transfer.op, transfer.length, transfer.failed ? FI_ECONNABORTED : 0,
                              0);
  }
  transfer.owes = false;
  transfer.op = nullptr;  // the owner may reuse its buffer: the bytes landed or were staged
}

void FakeFabric::release(uint32_t index) {
  Transfer& transfer = transfers_[index];
  if (transfer.events != 0) return;
  if (transfer.dead || (transfer.landed && transfer.delivered && !transfer.owes)) {
    transfer.dead = true;  // not visited again before its reuse
    free_.push_back(index);
  }
}

void FakeFabric::landWrite(Transfer& transfer) {
  transfer.delivered = true;
  ++stats_.writes;
  ++stats_.writesByRail[transfer.sourceRail];
  if (static_cast<int>(transfer.sourceRail) == restoredRail_ &&
      stats_.firstWriteAfterRestoreNs == 0) {
    stats_.firstWriteAfterRestoreNs = clockNs_;
  }
  FakeEngine& target = *transfer.target;
  if (transfer.length != 0) {
    if (!target.keys().allows(transfer.key, transfer.targetRail, transfer.remoteAddress,
                              transfer.length, FI_REMOTE_WRITE)) {
      ADD_FAILURE() << "a " << transfer.length << "-byte write into device " << target.id()
                    << " rail " << int{transfer.targetRail} << " with key " << transfer.key
                    << ", which does not cover it there";
      return;
    }
    copyOut(transfer, 0, reinterpret_cast<uint8_t*>(transfer.remoteAddress), transfer.length);
  }
  uint64_t data = transfer.data & immediateMask(target.immediateBytes());
  if (writeObserver_) writeObserver_(data, transfer.length);
  if (transfer.failed) {
    // Landed on a failed rail, its acknowledgement lost: the target may read it after the
    // sender's question about it, which came on the leader and was read first in the same
    // progress call (FabricEngine reads the leader last; a write that lands just after its
    // rail was read is read at the next call).
    if (options_.failedLandedAfterQuestion) {
      target.remoteWriteLater(transfer.targetRail, data, transfer.length, 64, true);
    } else {
      target.remoteWriteLater(transfer.targetRail, data, transfer.length, 1);
    }
    return;
  }
  target.remoteWrite(transfer.targetRail, data, transfer.length);
}

void FakeFabric::landRead(Transfer& transfer) {
  transfer.delivered = true;
  ++stats_.reads;
  if (!transfer.target->keys().allows(transfer.key, transfer.targetRail, transfer.remoteAddress,
                                      transfer.length, FI_REMOTE_READ)) {
    ADD_FAILURE() << "a " << transfer.length << "-byte read from device " << transfer.target->id()
                  << " with key " << transfer.key << ", which does not cover it there";
    return;
  }
  if (transfer.length != 0) {
    memcpy(transfer.op->buffer, reinterpret_cast<const void*>(transfer.remoteAddress),
           transfer.length);
  }
}

void FakeFabric::landMessage(uint32_t index) {
  Transfer& transfer = transfers_[index];
  core::Operation* receive =
      transfer.target->takeReceive(transfer.kind == Kind::kSend, transfer.data);
  if (receive != nullptr) {
    deliver(index, *receive);
    return;
  }
  // No receive yet: the message waits, copied, as an unexpected message does in a provider.
  if (!transfer.isStaged) stage(transfer);
  unexpected_[transfer.target->id()].push_back(index);
}

bool FakeFabric::deliverWaiting(FakeEngine& target, core::Operation& receive) {
  bool tagged = receive.type == core::OpType::kRecv;
  std::vector<uint32_t>& waiting = unexpected_[target.id()];
  for (auto it = waiting.begin(); it != waiting.end(); ++it) {
    Transfer& message = transfers_[*it];
    if ((message.kind == Kind::kSend) != tagged) continue;
    if (tagged && ((message.data ^ receive.tag) & ~receive.ignore) != 0) continue;
    uint32_t index = *it;
    waiting.erase(it);
    deliver(index, receive);
    release(index);
    return true;
  }
  return false;
}

void FakeFabric::deliver(uint32_t index, core::Operation& receive) {
  Transfer& transfer = transfers_[index];
  ++stats_.messages;
  core::ScratchArea* room = receive.withRoom ? transfer.target->room() : nullptr;
  size_t fits = std::min(transfer.length, receive.length + (room != nullptr ? room->size() : 0));
  size_t inBuffer = std::min(fits, receive.length);
  copyOut(transfer, 0, static_cast<uint8_t*>(receive.buffer), inBuffer);
  if (fits > inBuffer) copyOut(transfer, inBuffer, room->data(), fits - inBuffer);
  if (transfer.length > fits) {
    ++stats_.truncated;
    transfer.target->complete(&receive, fits, FI_ETRUNC, transfer.length - fits);
  } else {
    transfer.target->complete(&receive, transfer.length, 0, 0);
  }
  transfer.delivered = true;
}

void FakeFabric::forEachOwed(const FakeEngine& engine,
                             const std::function<void(const core::Operation&)>& visit) const {
  for (const Transfer& transfer : transfers_) {
    if (transfer.source == &engine && transfer.owes && !transfer.dead) visit(*transfer.op);
  }
}

void FakeFabric::forget(FakeEngine& engine) {
  for (Transfer& transfer : transfers_) {
    if (transfer.source == &engine || transfer.target == &engine) {
      transfer.dead = true;
      transfer.op = nullptr;
    }
  }
  unexpected_[engine.id()].clear();
  // Dead now: they land as nothing, and their entries are reused.
  for (uint32_t index : departing_[engine.id()]) schedule(index);
  departing_[engine.id()].clear();
  engines_[engine.id()] = nullptr;
  pumps_[engine.id()] = nullptr;
}

}  // namespace nnf::test
