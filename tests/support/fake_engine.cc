#include "support/fake_engine.h"

#include <rdma/fi_errno.h>

#include <gtest/gtest.h>

#include <algorithm>

#include "support/fake_fabric.h"

namespace nnf::test {
namespace {
bool isReceive(const core::Operation& op) {
  return op.type == core::OpType::kRecv || op.type == core::OpType::kControlRecv;
}
}  // namespace

FakeEngine::FakeEngine(FakeFabric& fabric, size_t id, std::vector<const FakeRail*> rails,
                       FakeKeys& keys, const FakeRailSpec& spec)
    : fabric_(fabric), id_(id), rails_(std::move(rails)), keys_(keys), spec_(spec) {
  addresses_.resize(rails_.size());
  cq_.reserve(1024);
}

FakeEngine::~FakeEngine() {
  fabric_.forget(*this);
}

int FakeEngine::insertAddress(size_t rail, const uint8_t* address, size_t length, fi_addr_t* out) {
  size_t engine = 0;
  size_t index = 0;
  if (!parseFakeAddress(address, length, &engine, &index)) return -FI_EINVAL;
  FakeEngine* target = fabric_.engineAt(engine);
  if (target == nullptr || index >= target->rails_.size()) return -FI_EINVAL;
  addresses_[rail].push_back(Peer{target, index});
  *out = addresses_[rail].size() - 1;
  return 0;
}

FakeEngine::Peer FakeEngine::peer(size_t rail, fi_addr_t address) const {
  return address < addresses_[rail].size() ? addresses_[rail][address] : Peer{};
}

bool FakeEngine::checkLocal(const core::Operation& op, const void* buffer, size_t length,
                            const char* what) {
  if (!spec_.localRegistration || length == 0) return true;
  const void* desc = buffer == op.header ? op.headerDesc : op.desc;
  if (keys_.covers(desc, op.rail, buffer, length)) return true;
  ADD_FAILURE() << "device " << id_ << ": a " << length << "-byte " << core::opTypeName(op.type)
                << " on rail " << int{op.rail} << " has no descriptor covering its " << what;
  return false;
}

abi::Result FakeEngine::post(core::Operation& op) {
  core::OpQueue& held = isReceive(op) ? heldRx_ : heldTx_;
  // Behind others held, or held itself as by a full queue: posted later, in order.
  if (!held.empty() || fabric_.holdPost()) {
    held.push(op);
    return abi::kSuccess;
  }
  start(op);
  return abi::kSuccess;
}

void FakeEngine::start(core::Operation& op) {
  op.inFlight = true;
  switch (op.type) {
    case core::OpType::kRecv:
    case core::OpType::kControlRecv: {
      checkLocal(op, op.buffer, op.length, "receive buffer");
      bool tagged = op.type == core::OpType::kRecv;
      if (!fabric_.deliverWaiting(*this, op)) (tagged ? tagged_ : untagged_).push_back(&op);
      return;
    }
    case core::OpType::kRead:
      checkLocal(op, op.buffer, op.length, "read buffer");
      fabric_.transmit(*this, op, FakeFabric::Kind::kRead);
      return;
    case core::OpType::kWrite:
      if (op.headerLength != 0) checkLocal(op, op.header, op.headerLength, "header");
      checkLocal(op, op.buffer, op.length, "source buffer");
      fabric_.transmit(*this, op, FakeFabric::Kind::kWrite);
      return;
    case core::OpType::kSend:
      checkLocal(op, op.buffer, op.length, "source buffer");
      fabric_.transmit(*this, op, FakeFabric::Kind::kSend);
      return;
    case core::OpType::kControlSend:
      checkLocal(op, op.buffer, op.length, "source buffer");
      fabric_.transmit(*this, op, FakeFabric::Kind::kControlSend);
      return;
  }
}

abi::Result FakeEngine::inject(const core::Operation& op) {
  if (!heldTx_.empty()) return abi::kInProgress;  // as the real engine: order first
  if (op.length > spec_.injectSize) {
    ADD_FAILURE() << "device " << id_ << ": inject of " << op.length << " bytes, the limit is "
                  << spec_.injectSize;
    return abi::kSystemError;
  }
  if (op.type != core::OpType::kWrite && op.type != core::OpType::kSend) {
    ADD_FAILURE() << "inject of a " << core::opTypeName(op.type);
    return abi::kSystemError;
  }
  fabric_.transmit(
      *this, op,
      op.type == core::OpType::kWrite ? FakeFabric::Kind::kWrite : FakeFabric::Kind::kSend);
  return abi::kSuccess;
}

core::Operation* FakeEngine::takeReceive(bool tagged, uint64_t tag) {
  std::vector<core::Operation*>& posted = tagged ? tagged_ : untagged_;
  for (auto it = posted.begin(); it != posted.end(); ++it) {
    core::Operation* receive = *it;
    if (tagged && ((tag ^ receive->tag) & ~receive->ignore) != 0) continue;
    posted.erase(it);
    return receive;
  }
  return nullptr;
}

void FakeEngine::cancel(core::Operation& op) {
  for (std::vector<core::Operation*>* list : {&tagged_, &untagged_}) {
    auto it = std::find(list->begin(), list->end(), &op);
    if (it == list->end()) continue;
    list->erase(it);
    fabric_.noteCancelled();
    complete(&op, 0, FI_ECANCELED, 0);
    return;
  }
  // Matched receives, sends, writes and reads complete on their own.
}

void FakeEngine::unqueue(core::Operation& op) {
  (isReceive(op) ? heldRx_ : heldTx_).remove(op);
}

void FakeEngine::complete(core::Operation* op, size_t length, int error, size_t overflow) {
  Completion completion;
  completion.op = op;
  completion.length = length;
  completion.error = error;
  completion.overflow = overflow;
  cq_.push_back(completion);
  if (op == nullptr || op->type != core::OpType::kControlRecv || error != 0) return;
  releaseLaterWhere([](Later& later) { return later.afterMessage; });
}

void FakeEngine::releaseLaterWhere(bool (*due)(Later&)) {
  for (size_t i = 0; i < later_.size();) {
    if (!due(later_[i])) {
      ++i;
      continue;
    }
    cq_.push_back(later_[i].completion);
    later_[i] = later_.back();
    later_.pop_back();
  }
}

void FakeEngine::remoteWrite(size_t rail, uint64_t data, size_t length) {
  Completion completion;
  completion.kind = Completion::Kind::kRemote;
  completion.rail = static_cast<uint8_t>(rail);
  completion.data = data;
  completion.length = length;
  cq_.push_back(completion);
}

void FakeEngine::remoteWriteLater(size_t rail, uint64_t data, size_t length, uint32_t progresses,
                                  bool afterMessage) {
  Completion completion;
  completion.kind = Completion::Kind::kRemote;
  completion.rail = static_cast<uint8_t>(rail);
  completion.data = data;
  completion.length = length;
  later_.push_back(Later{completion, progresses, afterMessage});
}

void FakeEngine::releaseHeld() {
  // Held posts wait a few progress calls, then go, in order, with everything held behind them.
  for (core::OpQueue* held : {&heldRx_, &heldTx_}) {
    if (held->empty() || fabric_.draw() % 3 != 0) continue;
    while (core::Operation* op = held->front()) {
      held->remove(*op);
      start(*op);
    }
  }
}

uint64_t FakeEngine::nowNs() const {
  return fabric_.nowNs();
}

abi::Result FakeEngine::progress(core::EngineEvents& events) {
  fabric_.tick(*this);
  releaseHeld();
  releaseLaterWhere([](Later& later) { return --later.progresses == 0; });
  // Indexed from a member: a completion's owner may post (appending here) or progress again
  // (going on from where this call is).
  while (head_ < cq_.size()) {
    Completion completion = cq_[head_++];
    if (completion.kind == Completion::Kind::kRemote) {
      events.onRemoteWrite(completion.rail, completion.data, completion.length);
      continue;
    }
    core::Operation& op = *completion.op;
    op.inFlight = false;
    if (completion.error == 0) {
      op.owner->onComplete(op, completion.length);
    } else {
      // As the real engine: the device judges the rail before the owner hears of it.
      events.onTransferError(op.rail, op, completion.error, fi_strerror(completion.error));
      op.owner->onError(op, completion.error, completion.overflow, fi_strerror(completion.error));
    }
  }
  cq_.clear();
  head_ = 0;
  return abi::kSuccess;
}

void FakeEngine::forEachHeld(const std::function<void(const core::Operation&)>& visit) const {
  for (const core::Operation* op : tagged_) visit(*op);
  for (const core::Operation* op : untagged_) visit(*op);
  for (const core::OpQueue* held : {&heldRx_, &heldTx_}) {
    for (const core::Operation* op = held->front(); op != nullptr; op = op->nextQueued) visit(*op);
  }
  fabric_.forEachOwed(*this, visit);
  for (size_t i = head_; i < cq_.size(); ++i) {
    if (cq_[i].kind == Completion::Kind::kOp) visit(*cq_[i].op);
  }
}

}  // namespace nnf::test
