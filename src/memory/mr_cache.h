// Registration cache behind regIsGlobal = 1: page-aligned ranges with reference counts, so that
// registering a buffer (or any sub-range of one) that is already registered costs one lookup.
//
// Policy (docs/memory.md has the reasoning):
// - A request hits an indexed entry of the same memory type and device whose range contains the
//   request and whose access bits include the requested ones.
// - A request that overlaps indexed entries without being contained in one gets a new entry: for
//   host memory it covers the union of the request and those entries (the union of overlapping
//   ranges has no holes, so it is all mapped memory); for device memory only the request (a GPU
//   registration must not straddle allocations). The overlapped entries leave the index; holders
//   keep using them until they release them. The index therefore never overlaps within one
//   (type, device), which keeps lookups O(log n).
// - On the last release an entry is kept, unreferenced, while the kept set stays within
//   maxKeptEntries and maxKeptBytes (0: no byte bound); beyond that the least recently used kept
//   entries are deregistered. With maxKeptEntries 0 (the default) the registration goes with its
//   last holder: without a memory monitor a kept registration could outlive the memory it maps.
// - Disabled: every acquire registers anew and every release deregisters.
// Thread safety: every method may be called from any thread. The registrar is called with the
// cache lock held, so the caller must not hold the registrar's domain lock when calling in.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "memory/region.h"

namespace nnf::config {
class Config;
}

namespace nnf::memory {

struct MrCacheOptions {
  bool enabled = true;
  size_t maxKeptEntries = 0;
  size_t maxKeptBytes = 0;
  size_t pageSize = 0;  // 0: the system page size

  static MrCacheOptions fromConfig(const config::Config& config);
};

struct MrCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;  // kept entries deregistered to respect the bounds
  uint64_t live = 0;       // provider registrations alive now (referenced or kept)
  uint64_t kept = 0;       // unreferenced entries kept for reuse
  uint64_t keptBytes = 0;
};

// One provider registration shared by its holders; opaque apart from what is read here.
class MrHandle {
 public:
  const Registration& registration() const { return registration_; }
  MemType type() const { return type_; }
  int device() const { return device_; }

 private:
  friend class MrCache;
  Registration registration_;
  uintptr_t start_ = 0;
  uintptr_t end_ = 0;
  MemType type_ = MemType::kHost;
  int device_ = -1;
  uint64_t access_ = 0;
  long refs_ = 0;
  bool indexed_ = false;
  bool kept_ = false;
  std::list<MrHandle*>::iterator lru_;
};

class MrCache {
 public:
  MrCache(Registrar& registrar, const MrCacheOptions& options);
  // Deregisters everything still registered; warns about handles that were never released.
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // Returns 0 and a handle whose registration covers the region, or the registrar's error.
  int acquire(const Region& region, MrHandle** out);
  // Drops one reference. An unknown or already released handle gives -FI_EINVAL and a WARN.
  int release(MrHandle* handle);
  // Deregisters every kept (unreferenced) entry.
  void trimAll();

  MrCacheStats stats() const;
  const MrCacheOptions& options() const { return options_; }

 private:
  using Key = std::tuple<int, int, uintptr_t>;  // type, device, start
  static Key keyOf(const MrHandle* entry) {
    return Key{static_cast<int>(entry->type_), entry->device_, entry->start_};
  }

  MrHandle* findContaining(MemType type, int device, uintptr_t start, uintptr_t end,
                           uint64_t access);
  void unindex(MrHandle* entry);
  void unkeep(MrHandle* entry);
  void destroy(MrHandle* entry);
  void trimLocked();
  // acquire()'s steps, under mutex_. Indexed entries of the same kind that overlap
  // [start, end), in address order.
  void collectOverlapped(MemType type, int device, uintptr_t start, uintptr_t end,
                         std::vector<MrHandle*>& overlapped);
  // Registers `wanted` as a new entry with one reference; the registrar's error otherwise.
  int createEntry(const Region& wanted, MrHandle** out);
  // The new entry takes the place in the index of the entries it overlaps.
  void replaceInIndex(MrHandle* entry, const std::vector<MrHandle*>& overlapped);

  Registrar& registrar_;
  MrCacheOptions options_;
  mutable std::mutex mutex_;
  std::map<Key, MrHandle*> index_;
  std::set<MrHandle*> entries_;  // every entry with a live registration
  std::list<MrHandle*> lru_;     // kept entries, least recently used first
  MrCacheStats stats_;
};

}  // namespace nnf::memory
