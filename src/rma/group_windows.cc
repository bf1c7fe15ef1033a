// Symmetric windows (regMrSym, collective): each rank registers its buffer and sends every rank
// its record (address, size, one key per rail); the call returns once every rank's record of
// that window has come. A record may come before this rank registers the window itself: it
// waits in records_ until then.
#include <memory>

#include "core/device.h"
#include "log/log.h"
#include "rma/group.h"

namespace nnf::rma {
namespace {

using Lock = std::lock_guard<fabric::DomainLock>;

}  // namespace

void Group::storeRecord(const WindowMessage& record) {
  if (record.index >= windows_.size()) {
    records_.push_back(record);  // ours comes with our own regMrSym
    return;
  }
  Window& window = *windows_[record.index];
  if (!window.alive) return;
  RemoteWindow& remote = window.remote[record.rank];
  remote.address = record.address;
  remote.size = record.size;
  for (size_t r = 0; r < memory::kMaxRails; ++r) remote.keys[r] = record.keys[r];
  remote.host = record.hostMemory != 0;
  remote.present = true;
}

void Group::storeEarlyRecords(uint32_t index) {
  for (auto it = records_.begin(); it != records_.end();) {
    if (it->index == index) {
      storeRecord(*it);
      it = records_.erase(it);
    } else {
      ++it;
    }
  }
}

abi::Result Group::registerWindow(void* data, size_t size, int type, uint64_t dmabufOffset, int fd,
                                  uint64_t flags, Window** out) {
  core::Device& dev = device();
  auto window = std::make_unique<Window>();
  window->ref.kind = HandleKind::kWindow;
  window->ref.object = window.get();
  window->group = this;
  window->base = static_cast<uint8_t*>(data);
  window->size = size;
  window->host = type == abi::kPtrHost;
  window->neverReset = (flags & kMrFlagSignalNeverReset) != 0;
  window->remote.resize(nranks_);
  if (size > 0) {
    // Through the device's MR cache, like NCCL's net buffers: one registration serves both.
    abi::Result result =
        dev.memory().registerBuffer(data, size, type, fd, dmabufOffset, &window->mh, kRmaAccess);
    if (result != abi::kSuccess) return result;  // logged
  }
  WindowMessage record{};
  {
    Lock lock(dev.domainLock());
    window->index = static_cast<uint32_t>(windows_.size());
    record.magic = WindowMessage::kMagic;
    record.version = kVersion;
    record.hostMemory = window->host ? 1 : 0;
    record.kind = static_cast<uint32_t>(MessageKind::kWindow);
    record.rank = rank_;
    record.index = window->index;
    record.size = size;
    if (window->mh != nullptr) {
      record.address = window->mh->remoteAddress(data);
      for (size_t r = 0; r < memory::kMaxRails; ++r) record.keys[r] = window->mh->key(r);
    }
    windows_.push_back(std::move(window));
    Window& added = *windows_.back();
    storeRecord(record);  // our own
    storeEarlyRecords(added.index);
    recordsWanted_ = added.index;
    for (uint32_t p = 0; p < nranks_; ++p) {
      if (p == rank_ || peers_[p].dead) continue;
      record.session = peers_[p].session;
      abi::Result result = sendMessage(p, peers_[p].groupId, &record, sizeof(record));
      if (result != abi::kSuccess) return result;
    }
    *out = &added;
  }
  if (!exchange("regMrSym", Phase::kWindow)) {
    deregisterWindow(**out);
    *out = nullptr;
    return abi::kRemoteError;
  }
  return abi::kSuccess;
}

abi::Result Group::deregisterWindow(Window& window) {
  core::MemoryHandle* mh = window.mh;
  bool deferMr = false;
  {
    Lock lock(device().domainLock());
    window.alive = false;
    window.ref.magic = HandleRef::kMagicDead;
    if (words_) words_->forgetWindow(window.index);
    if (mh != nullptr) {
      // Operations still using it keep the key and descriptor valid until they end.
      mh->released = true;
      deferMr = mh->activeUses > 0;
      mh->mrOwed = deferMr;
    }
    window.mh = nullptr;
  }
  if (mh == nullptr) return abi::kSuccess;
  core::MemoryRegistry* registry = mh->registry;
  abi::Result result = registry->deregister(mh, deferMr, deferMr);
  registry->releaseOwed();
  return result;
}

}  // namespace nnf::rma
