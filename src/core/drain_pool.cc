#include "core/drain_pool.h"

#include <rdma/fi_errno.h>

#include <algorithm>

#include "core/device.h"
#include "core/tags.h"
#include "log/log.h"

namespace nnf::core {

DrainPool::DrainPool(Device& device, size_t capacity, ScratchArea* scratch)
    : device_(device), capacity_(capacity), scratch_(scratch) {}

DrainPool::~DrainPool() {
  for (auto& [id, entry] : byId_) device_.controlArena().release(&entry->slot);
  for (auto& entry : stopping_) device_.controlArena().release(&entry->slot);
}

void DrainPool::add(uint32_t id) {
  if (capacity_ == 0 || byId_.count(id) != 0) return;
  while (byId_.size() >= capacity_ && !order_.empty()) {
    uint32_t oldest = order_.front();
    order_.pop_front();
    remove(oldest);
  }
  auto entry = std::make_unique<Entry>();
  bool shared = scratch_ != nullptr;
  if (!shared && !device_.controlArena().acquire(&entry->slot)) return;  // logged
  entry->id = id;
  Operation& op = entry->op;
  op.owner = this;
  op.type = OpType::kRecv;
  op.buffer = shared ? scratch_->data() : entry->slot.data;
  op.length = shared ? scratch_->size() : ControlSlot::kSize;
  op.desc = shared ? scratch_->desc() : entry->slot.desc;
  // The comm id bits must match; data or control, sequence number and NCCL tag may be anything.
  op.tag = uint64_t{id & tags::kMaxCommId} << tags::kCommIdShift;
  op.ignore = ~(uint64_t{tags::kMaxCommId} << tags::kCommIdShift);
  if (device_.post(op) != abi::kSuccess) {
    if (!warned_) NNF_WARN("device %d: cannot drain closed comm %u", device_.index(), id);
    warned_ = true;
    device_.controlArena().release(&entry->slot);
    return;
  }
  order_.push_back(id);
  byId_.emplace(id, std::move(entry));
}

void DrainPool::remove(uint32_t id) {
  auto it = byId_.find(id);
  if (it == byId_.end()) return;
  std::unique_ptr<Entry> entry = std::move(it->second);
  byId_.erase(it);
  auto pos = std::find(order_.begin(), order_.end(), id);
  if (pos != order_.end()) order_.erase(pos);
  Entry* raw = entry.get();
  stopping_.push_back(std::move(entry));
  stop(raw);
}

void DrainPool::stop(Entry* entry) {
  entry->active = false;
  Operation& op = entry->op;
  if (op.queued) device_.unqueue(op);
  // A posted receive that has not matched leaves the provider's list at once; one that matched
  // a message already completes with it. Either way a new comm with this id loses nothing.
  if (op.inFlight) {
    device_.cancel(op);
  } else {
    free(entry);
  }
}

void DrainPool::free(Entry* entry) {
  device_.controlArena().release(&entry->slot);
  auto it = std::find_if(stopping_.begin(), stopping_.end(),
                         [entry](const std::unique_ptr<Entry>& e) { return e.get() == entry; });
  if (it != stopping_.end()) stopping_.erase(it);
}

void DrainPool::repost(Entry* entry) {
  if (device_.post(entry->op) == abi::kSuccess) return;
  if (!warned_) NNF_WARN("device %d: cannot drain closed comm %u", device_.index(), entry->id);
  warned_ = true;
  remove(entry->id);
}

void DrainPool::onComplete(Operation& op, size_t length) {
  Entry* entry = recordOf<Entry>(op);
  if (scratch_ != nullptr) scratch_->landed(length);
  if (!entry->active) {
    free(entry);
    return;
  }
  ++discarded_;
  repost(entry);
}

void DrainPool::onError(Operation& op, int error, size_t /*overflow*/, const char* /*text*/) {
  Entry* entry = recordOf<Entry>(op);
  if (!entry->active) {
    free(entry);
    return;
  }
  // Truncation is the usual way a late data message ends here. Any other error comes from a
  // broken connection (a dead peer sends nothing more): stop draining that id rather than post
  // again into a provider that is tearing the connection down.
  if (error == FI_ETRUNC) {
    ++discarded_;
    repost(entry);
    return;
  }
  remove(entry->id);
}

}  // namespace nnf::core
