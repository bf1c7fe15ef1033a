#include "memory/mr_cache.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include <rdma/fi_errno.h>

#include "config/config.h"
#include "log/log.h"

namespace nnf::memory {

MrCacheOptions MrCacheOptions::fromConfig(const config::Config& config) {
  MrCacheOptions options;
  options.enabled = config.flag(config::Param::kMrCache);
  options.maxKeptEntries = static_cast<size_t>(config.integer(config::Param::kMrCacheMaxEntries));
  int64_t bytes = config.integer(config::Param::kMrCacheMaxBytes);
  options.maxKeptBytes = bytes > 0 ? static_cast<size_t>(bytes) : 0;
  return options;
}

MrCache::MrCache(Registrar& registrar, const MrCacheOptions& options)
    : registrar_(registrar), options_(options) {
  if (options_.pageSize == 0) options_.pageSize = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Alignment below is done with masks.
  if ((options_.pageSize & (options_.pageSize - 1)) != 0) options_.pageSize = 4096;
}

MrCache::~MrCache() {
  std::lock_guard<std::mutex> guard(mutex_);
  size_t referenced = 0;
  for (MrHandle* entry : entries_) {
    referenced += entry->refs_ > 0;
    registrar_.deregister(entry->registration_);
    delete entry;
  }
  if (referenced > 0)
    NNF_WARN("MR cache closed with %zu registrations still referenced (missing deregMr)",
             referenced);
}

MrHandle* MrCache::findContaining(MemType type, int device, uintptr_t start, uintptr_t end,
                                  uint64_t access) {
  auto it = index_.upper_bound(Key{static_cast<int>(type), device, start});
  if (it == index_.begin()) return nullptr;
  --it;
  MrHandle* entry = it->second;
  if (entry->type_ != type || entry->device_ != device) return nullptr;
  if (entry->start_ > start || entry->end_ < end) return nullptr;
  if ((entry->access_ & access) != access) return nullptr;
  return entry;
}

void MrCache::unindex(MrHandle* entry) {
  if (!entry->indexed_) return;
  index_.erase(keyOf(entry));
  entry->indexed_ = false;
}

void MrCache::unkeep(MrHandle* entry) {
  if (!entry->kept_) return;
  lru_.erase(entry->lru_);
  entry->kept_ = false;
  --stats_.kept;
  stats_.keptBytes -= entry->end_ - entry->start_;
}

void MrCache::destroy(MrHandle* entry) {
  unkeep(entry);
  unindex(entry);
  entries_.erase(entry);
  // A failed deregistration is reported by the registrar; the entry is gone either way, since
  // nobody can use it any more.
  registrar_.deregister(entry->registration_);
  --stats_.live;
  delete entry;
}

void MrCache::trimLocked() {
  while (!lru_.empty() &&
         (stats_.kept > options_.maxKeptEntries ||
          (options_.maxKeptBytes > 0 && stats_.keptBytes > options_.maxKeptBytes))) {
    ++stats_.evictions;
    destroy(lru_.front());
  }
}

int MrCache::acquire(const Region& region, MrHandle** out) {
  if (out == nullptr || region.base == nullptr) return -FI_EINVAL;
  auto start = reinterpret_cast<uintptr_t>(region.base);
  // A zero-byte buffer still needs a valid handle: it is given the page it sits in.
  uintptr_t end = start + (region.length > 0 ? region.length : 1);
  if (end < start) return -FI_EINVAL;  // wraps around the address space
  // DMA-BUF ranges stay exact: widening them would move the offset into the exported buffer.
  if (region.type != MemType::kDmaBuf) {
    uintptr_t mask = options_.pageSize - 1;
    start &= ~mask;
    end = (end + mask) & ~mask;
  }
  int device = region.type == MemType::kHost ? -1 : region.device;

  std::lock_guard<std::mutex> guard(mutex_);
  if (options_.enabled) {
    MrHandle* hit = findContaining(region.type, device, start, end, region.access);
    if (hit != nullptr) {
      unkeep(hit);
      ++hit->refs_;
      ++stats_.hits;
      *out = hit;
      return 0;
    }
  }
  ++stats_.misses;

  // A miss registers one entry that takes over what it overlaps: their access, and for host
  // memory their ranges too.
  std::vector<MrHandle*> overlapped;
  uint64_t access = region.access;
  if (options_.enabled) {
    collectOverlapped(region.type, device, start, end, overlapped);
    for (MrHandle* entry : overlapped) access |= entry->access_;
  }
  if (region.type == MemType::kHost) {
    for (MrHandle* entry : overlapped) {
      start = std::min(start, entry->start_);
      end = std::max(end, entry->end_);
    }
  }

  Region wanted = region;
  wanted.base = reinterpret_cast<const void*>(start);
  wanted.length = end - start;
  wanted.device = device;
  wanted.access = access;
  MrHandle* entry = nullptr;
  int rc = createEntry(wanted, &entry);
  if (rc != 0) return rc;
  if (options_.enabled) replaceInIndex(entry, overlapped);
  *out = entry;
  return 0;
}

void MrCache::collectOverlapped(MemType type, int device, uintptr_t start, uintptr_t end,
                                std::vector<MrHandle*>& overlapped) {
  // The index does not overlap within a kind, so they are the predecessor and the ones
  // starting inside the range.
  auto sameKind = [&](const MrHandle* entry) {
    return entry->type_ == type && entry->device_ == device;
  };
  auto it = index_.upper_bound(Key{static_cast<int>(type), device, start});
  if (it != index_.begin()) {
    MrHandle* before = std::prev(it)->second;
    if (sameKind(before) && before->end_ > start) overlapped.push_back(before);
  }
  for (; it != index_.end() && sameKind(it->second) && it->second->start_ < end; ++it)
    overlapped.push_back(it->second);
}

int MrCache::createEntry(const Region& wanted, MrHandle** out) {
  auto* entry = new MrHandle;
  int rc = registrar_.registerRegion(wanted, &entry->registration_);
  if (rc != 0) {
    delete entry;
    return rc;
  }
  entry->start_ = reinterpret_cast<uintptr_t>(wanted.base);
  entry->end_ = entry->start_ + wanted.length;
  entry->type_ = wanted.type;
  entry->device_ = wanted.device;
  entry->access_ = wanted.access;
  entry->refs_ = 1;
  entries_.insert(entry);
  ++stats_.live;
  *out = entry;
  return 0;
}

void MrCache::replaceInIndex(MrHandle* entry, const std::vector<MrHandle*>& overlapped) {
  // Unreferenced entries it overlaps are released now; referenced ones live on for their
  // holders and go with their last release.
  for (MrHandle* old : overlapped) {
    unindex(old);
    if (old->refs_ == 0) destroy(old);
  }
  index_.emplace(keyOf(entry), entry);
  entry->indexed_ = true;
}

int MrCache::release(MrHandle* handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (handle == nullptr || entries_.count(handle) == 0 || handle->refs_ <= 0) {
    NNF_WARN("deregMr of an unknown or already released memory handle %p",
             static_cast<void*>(handle));
    return -FI_EINVAL;
  }
  if (--handle->refs_ > 0) return 0;
  if (!handle->indexed_ || options_.maxKeptEntries == 0) {
    destroy(handle);
    return 0;
  }
  handle->kept_ = true;
  handle->lru_ = lru_.insert(lru_.end(), handle);
  ++stats_.kept;
  stats_.keptBytes += handle->end_ - handle->start_;
  trimLocked();
  return 0;
}

void MrCache::trimAll() {
  std::lock_guard<std::mutex> guard(mutex_);
  while (!lru_.empty()) destroy(lru_.front());
}

MrCacheStats MrCache::stats() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return stats_;
}

}  // namespace nnf::memory
