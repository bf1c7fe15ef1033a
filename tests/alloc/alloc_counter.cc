// The allocation counter and the interposer that feeds it (see alloc_counter.h).
#include "alloc/alloc_counter.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

// ---------------------------------------------------------------------------------------------
// The counter. Everything here is plain static storage: the hooks must never allocate.
// ---------------------------------------------------------------------------------------------
namespace nnf::test::alloc {

Object g_objects[kMaxObjects];
int g_pluginObject = -1;
int g_mainObject = -1;
std::atomic<uint64_t> g_pluginFrees{0};
std::atomic<uint64_t> g_frees{0};
Stack g_firstStack;
Stack g_firstPluginStack;

namespace {

constexpr int kMaxRanges = 256;
constexpr int kMaxFrames = 64;

struct Range {
  uintptr_t begin;
  uintptr_t end;
  int object;
};

int g_objectCount = 0;
Range g_ranges[kMaxRanges];
int g_rangeCount = 0;

std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_total{0};       // every allocation while armed, all threads
std::atomic<uint64_t> g_unknown{0};     // immediate caller in no object known at snapshot
std::atomic<uint64_t> g_unresolved{0};  // runtime caller, no non-runtime frame found
// Reentrancy guard: the unwinder must not be counted (nor recurse) if it ever allocates. TLS of
// the executable itself is static TLS: touching it never allocates.
thread_local bool t_inHook = false;

}  // namespace

int objectOf(uintptr_t address) {
  for (int i = 0; i < g_rangeCount; ++i)
    if (address >= g_ranges[i].begin && address < g_ranges[i].end) return g_ranges[i].object;
  return -1;
}

namespace {

void capture(Stack* stack) {
  if (stack->taken.exchange(true)) return;
  stack->count = backtrace(stack->frames, 16);
}

// The plugin's live allocations: open addressing with linear probing and backward-shift deletion
// (no tombstones, so that probes stay short however many come and go), under a spin lock.
constexpr size_t kLiveSlotBits = 20;
constexpr size_t kLiveSlots = size_t{1} << kLiveSlotBits;
uintptr_t g_liveAddress[kLiveSlots];  // 0: empty
size_t g_liveBytes[kLiveSlots];
std::atomic_flag g_liveLock = ATOMIC_FLAG_INIT;
std::atomic<uint64_t> g_liveCount{0};
uint64_t g_liveTotal = 0;
bool g_liveOverflow = false;

size_t homeOf(uintptr_t address) {
  return static_cast<size_t>(((address >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - kLiveSlotBits));
}

struct LiveLock {
  LiveLock() {
    while (g_liveLock.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~LiveLock() { g_liveLock.clear(std::memory_order_release); }
};

// [[maybe_unused]]: only the interposer (NNF_ALLOC_INTERPOSER, off under a sanitizer) calls the
// note functions.
[[maybe_unused]] void remember(void* pointer) {
  if (pointer == nullptr) return;
  auto address = reinterpret_cast<uintptr_t>(pointer);
  size_t bytes = malloc_usable_size(pointer);
  LiveLock lock;
  if (g_liveCount.load(std::memory_order_relaxed) >= kLiveSlots / 2) {
    g_liveOverflow = true;  // beyond half full the probes grow long: stop remembering
    return;
  }
  size_t slot = homeOf(address);
  while (g_liveAddress[slot] != 0) slot = (slot + 1) & (kLiveSlots - 1);
  g_liveAddress[slot] = address;
  g_liveBytes[slot] = bytes;
  g_liveTotal += bytes;
  g_liveCount.fetch_add(1, std::memory_order_relaxed);
}

void forget(void* pointer) {
  if (pointer == nullptr || g_liveCount.load(std::memory_order_relaxed) == 0) return;
  auto address = reinterpret_cast<uintptr_t>(pointer);
  LiveLock lock;
  size_t slot = homeOf(address);
  while (g_liveAddress[slot] != address) {
    if (g_liveAddress[slot] == 0) return;  // not the plugin's
    slot = (slot + 1) & (kLiveSlots - 1);
  }
  g_liveTotal -= g_liveBytes[slot];
  g_liveCount.fetch_sub(1, std::memory_order_relaxed);
  // Backward shift: move later entries of the run into the hole when their home allows it.
  size_t hole = slot;
  for (size_t next = (hole + 1) & (kLiveSlots - 1); g_liveAddress[next] != 0;
       next = (next + 1) & (kLiveSlots - 1)) {
    size_t home = homeOf(g_liveAddress[next]);
    bool movable = hole <= next ? (home <= hole || home > next) : (home <= hole && home > next);
    if (!movable) continue;
    g_liveAddress[hole] = g_liveAddress[next];
    g_liveBytes[hole] = g_liveBytes[next];
    hole = next;
  }
  g_liveAddress[hole] = 0;
}

// Counts one allocation by `caller`; true when it is charged to the plugin (its address is then
// to be remembered once made).
[[maybe_unused]] __attribute__((noinline)) bool noteAllocation(void* caller) {
  if (!g_armed.load(std::memory_order_relaxed) || t_inHook) return false;
  t_inHook = true;
  bool plugin = false;
  g_total.fetch_add(1, std::memory_order_relaxed);
  capture(&g_firstStack);
  int direct = objectOf(reinterpret_cast<uintptr_t>(caller));
  if (direct < 0) {
    g_unknown.fetch_add(1, std::memory_order_relaxed);
  } else {
    g_objects[direct].direct.fetch_add(1, std::memory_order_relaxed);
    int owner = direct;
    if (g_objects[direct].runtime) {
      owner = -1;
      void* frames[kMaxFrames];
      int count = backtrace(frames, kMaxFrames);
      int start = -1;
      for (int i = 0; i < count; ++i)
        if (frames[i] == caller) {
          start = i;
          break;
        }
      for (int i = start < 0 ? count : start + 1; i < count; ++i) {
        int object = objectOf(reinterpret_cast<uintptr_t>(frames[i]));
        if (object >= 0 && !g_objects[object].runtime) {
          owner = object;
          break;
        }
      }
    }
    if (owner >= 0 && (owner == g_pluginObject || direct == g_pluginObject))
      capture(&g_firstPluginStack);
    if (owner >= 0)
      g_objects[owner].attributed.fetch_add(1, std::memory_order_relaxed);
    else
      g_unresolved.fetch_add(1, std::memory_order_relaxed);
    plugin = owner >= 0 && owner == g_pluginObject;
  }
  t_inHook = false;
  return plugin;
}

[[maybe_unused]] void noteFree(void* pointer, void* caller) {
  forget(pointer);
  if (pointer == nullptr || !g_armed.load(std::memory_order_relaxed)) return;
  g_frees.fetch_add(1, std::memory_order_relaxed);
  if (g_pluginObject >= 0 && objectOf(reinterpret_cast<uintptr_t>(caller)) == g_pluginObject)
    g_pluginFrees.fetch_add(1, std::memory_order_relaxed);
}

bool isRuntime(const char* path) {
  const char* base = strrchr(path, '/');
  base = base != nullptr ? base + 1 : path;
  static const char* const kRuntime[] = {"libc.so",  "libstdc++.so",  "libgcc_s.so", "libm.so",
                                         "ld-linux", "libpthread.so", "libdl.so"};
  for (const char* prefix : kRuntime)
    if (strncmp(base, prefix, strlen(prefix)) == 0) return true;
  return false;
}

struct SnapshotContext {
  uintptr_t pluginBase;
};

int addObject(dl_phdr_info* info, size_t, void* data) {
  auto* context = static_cast<SnapshotContext*>(data);
  if (g_objectCount == kMaxObjects) return 1;
  int index = g_objectCount;
  Object& object = g_objects[index];
  const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  bool isMain = index == 0 && name[0] == '\0';  // the first object is the executable
  snprintf(object.name, sizeof(object.name), "%s", isMain ? "test executable" : name);
  object.runtime = !isMain && isRuntime(name);
  object.plugin = info->dlpi_addr == context->pluginBase;
  object.direct.store(0);
  object.attributed.store(0);
  bool any = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_LOAD || (header.p_flags & PF_X) == 0 || header.p_memsz == 0) continue;
    if (g_rangeCount == kMaxRanges) break;
    uintptr_t begin = info->dlpi_addr + header.p_vaddr;
    g_ranges[g_rangeCount++] = {begin, begin + header.p_memsz, index};
    any = true;
  }
  if (!any) return 0;  // vdso-like objects without text are of no use
  if (object.plugin) g_pluginObject = index;
  if (isMain) g_mainObject = index;
  ++g_objectCount;
  return 0;
}

}  // namespace

// Records every loaded object's executable segments; `pluginAddress` is any address inside the
// plugin (its ncclNetPlugin_v8 table). Call unarmed, after the plugin is loaded.
bool snapshot(const void* pluginAddress, char* error, size_t errorSize) {
  g_objectCount = 0;
  g_rangeCount = 0;
  g_pluginObject = -1;
  g_mainObject = -1;
  Dl_info info{};
  if (dladdr(pluginAddress, &info) == 0 || info.dli_fbase == nullptr) {
    snprintf(error, errorSize, "dladdr found no object holding ncclNetPlugin_v8 at %p",
             pluginAddress);
    return false;
  }
  // dli_fbase is the load base (the ELF header's address); dl_iterate_phdr reports dlpi_addr,
  // the load bias. For a shared object linked at 0 they are equal; check with the headers.
  SnapshotContext context{reinterpret_cast<uintptr_t>(info.dli_fbase)};
  dl_iterate_phdr(addObject, &context);
  if (g_pluginObject < 0) {
    snprintf(error, errorSize, "no loaded object has its base at %p (%s)", info.dli_fbase,
             info.dli_fname != nullptr ? info.dli_fname : "?");
    return false;
  }
  // Prime the unwinder (glibc loads libgcc_s on the first backtrace) while unarmed.
  void* frames[4];
  (void)backtrace(frames, 4);
  return true;
}

PluginSpan pluginText() {
  PluginSpan span;
  for (int i = 0; i < g_rangeCount; ++i)
    if (g_ranges[i].object == g_pluginObject) {
      span.textBegin = std::min(span.textBegin, g_ranges[i].begin);
      span.textEnd = std::max(span.textEnd, g_ranges[i].end);
      ++span.textRanges;
    }
  return span;
}

int mappedContains(dl_phdr_info* info, size_t, void* data) {
  auto* probe = static_cast<std::pair<uintptr_t, uintptr_t>*>(data);  // {address, base}
  if (info->dlpi_addr != probe->second) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_LOAD) continue;
    uintptr_t begin = info->dlpi_addr + header.p_vaddr;
    if (probe->first >= begin && probe->first < begin + header.p_memsz) return 1;
  }
  return 0;
}

static void reset() {
  g_total.store(0);
  g_unknown.store(0);
  g_unresolved.store(0);
  g_frees.store(0);
  g_pluginFrees.store(0);
  g_firstStack.taken.store(false);
  g_firstStack.count = 0;
  g_firstPluginStack.taken.store(false);
  g_firstPluginStack.count = 0;
  for (int i = 0; i < g_objectCount; ++i) {
    g_objects[i].direct.store(0);
    g_objects[i].attributed.store(0);
  }
}
void arm() {
  reset();
  g_armed.store(true, std::memory_order_seq_cst);
}
void disarm() {
  g_armed.store(false, std::memory_order_seq_cst);
}

uint64_t total() {
  return g_total.load();
}
uint64_t pluginDirect() {
  return g_pluginObject >= 0 ? g_objects[g_pluginObject].direct.load() : 0;
}
uint64_t pluginAttributed() {
  return g_pluginObject >= 0 ? g_objects[g_pluginObject].attributed.load() : 0;
}
uint64_t mainAttributed() {
  return g_mainObject >= 0 ? g_objects[g_mainObject].attributed.load() : 0;
}
uint64_t mainDirect() {
  return g_mainObject >= 0 ? g_objects[g_mainObject].direct.load() : 0;
}

// "libfabric.so.1 12 (direct 10), ..." for the objects that allocated (unarmed: may allocate).
std::string breakdown() {
  std::string text;
  for (int i = 0; i < g_objectCount; ++i) {
    const Object& object = g_objects[i];
    uint64_t direct = object.direct.load(), attributed = object.attributed.load();
    if (direct == 0 && attributed == 0) continue;
    const char* base = strrchr(object.name, '/');
    if (!text.empty()) text += "; ";
    text += base != nullptr ? base + 1 : object.name;
    text += ": direct " + std::to_string(direct) + ", attributed " + std::to_string(attributed);
  }
  char tail[160];
  snprintf(tail, sizeof(tail), "%sunknown caller %llu, runtime unresolved %llu",
           text.empty() ? "" : "; ", static_cast<unsigned long long>(g_unknown.load()),
           static_cast<unsigned long long>(g_unresolved.load()));
  return text + tail;
}

uint64_t pluginLiveBytes() {
  LiveLock lock;
  return g_liveTotal;
}
bool pluginLiveOverflowed() {
  LiveLock lock;
  return g_liveOverflow;
}

}  // namespace nnf::test::alloc

// ---------------------------------------------------------------------------------------------
// The interposer.
// ---------------------------------------------------------------------------------------------
#if NNF_ALLOC_INTERPOSER
extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* pointer, size_t size);
void __libc_free(void* pointer);
void* __libc_memalign(size_t alignment, size_t size);
void* __libc_valloc(size_t size);
void* __libc_pvalloc(size_t size);
}

namespace {
using nnf::test::alloc::forget;
using nnf::test::alloc::noteAllocation;
using nnf::test::alloc::noteFree;
using nnf::test::alloc::remember;

#define NNF_CALLER() __builtin_extract_return_addr(__builtin_return_address(0))

void* newOrThrow(size_t size, size_t alignment) {
  for (;;) {
    void* pointer = alignment <= alignof(std::max_align_t)
                        ? __libc_malloc(size == 0 ? 1 : size)
                        : __libc_memalign(alignment, size == 0 ? 1 : size);
    if (pointer != nullptr) return pointer;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}
void* newNoThrow(size_t size, size_t alignment) noexcept {
  try {
    return newOrThrow(size, alignment);
  } catch (...) {
    return nullptr;
  }
}
}  // namespace

extern "C" {
__attribute__((noinline)) void* malloc(size_t size) noexcept {
  bool plugin = noteAllocation(NNF_CALLER());
  void* pointer = __libc_malloc(size);
  if (plugin) remember(pointer);
  return pointer;
}
__attribute__((noinline)) void* calloc(size_t count, size_t size) noexcept {
  bool plugin = noteAllocation(NNF_CALLER());
  void* pointer = __libc_calloc(count, size);
  if (plugin) remember(pointer);
  return pointer;
}
// A block that moves or grows is forgotten, then remembered again when the plugin resized it.
void* reallocFor(void* caller, void* pointer, size_t size) {
  bool plugin = noteAllocation(caller);
  forget(pointer);
  void* moved = __libc_realloc(pointer, size);
  if (plugin) remember(moved != nullptr || size == 0 ? moved : pointer);
  return moved;
}
__attribute__((noinline)) void* realloc(void* pointer, size_t size) noexcept {
  return reallocFor(NNF_CALLER(), pointer, size);
}
__attribute__((noinline)) void* reallocarray(void* pointer, size_t count, size_t size) noexcept {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return reallocFor(NNF_CALLER(), pointer, bytes);
}
__attribute__((noinline)) void free(void* pointer) noexcept {
  noteFree(pointer, NNF_CALLER());
  __libc_free(pointer);
}
__attribute__((noinline)) int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  bool plugin = noteAllocation(NNF_CALLER());
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0)
    return EINVAL;
  void* pointer = __libc_memalign(alignment, size);
  if (pointer == nullptr) return ENOMEM;
  if (plugin) remember(pointer);
  *out = pointer;
  return 0;
}
__attribute__((noinline)) void* aligned_alloc(size_t alignment, size_t size) noexcept {
  bool plugin = noteAllocation(NNF_CALLER());
  void* pointer = __libc_memalign(alignment, size);
  if (plugin) remember(pointer);
  return pointer;
}
__attribute__((noinline)) void* memalign(size_t alignment, size_t size) noexcept {
  bool plugin = noteAllocation(NNF_CALLER());
  void* pointer = __libc_memalign(alignment, size);
  if (plugin) remember(pointer);
  return pointer;
}
__attribute__((noinline)) void* valloc(size_t size) noexcept {
  bool plugin = noteAllocation(NNF_CALLER());
  void* pointer = __libc_valloc(size);
  if (plugin) remember(pointer);
  return pointer;
}
__attribute__((noinline)) void* pvalloc(size_t size) noexcept {
  bool plugin = noteAllocation(NNF_CALLER());
  void* pointer = __libc_pvalloc(size);
  if (plugin) remember(pointer);
  return pointer;
}
}  // extern "C"

#define NNF_NEW(alignment)                     \
  bool plugin = noteAllocation(NNF_CALLER());  \
  void* pointer = newOrThrow(size, alignment); \
  if (plugin) remember(pointer);               \
  return pointer
#define NNF_NEW_NOTHROW(alignment)             \
  bool plugin = noteAllocation(NNF_CALLER());  \
  void* pointer = newNoThrow(size, alignment); \
  if (plugin) remember(pointer);               \
  return pointer
#define NNF_DELETE()               \
  noteFree(pointer, NNF_CALLER()); \
  __libc_free(pointer)

__attribute__((noinline)) void* operator new(size_t size) {
  NNF_NEW(0);
}
__attribute__((noinline)) void* operator new[](size_t size) {
  NNF_NEW(0);
}
__attribute__((noinline)) void* operator new(size_t size, const std::nothrow_t&) noexcept {
  NNF_NEW_NOTHROW(0);
}
__attribute__((noinline)) void* operator new[](size_t size, const std::nothrow_t&) noexcept {
  NNF_NEW_NOTHROW(0);
}
__attribute__((noinline)) void* operator new(size_t size, std::align_val_t alignment) {
  NNF_NEW(static_cast<size_t>(alignment));
}
__attribute__((noinline)) void* operator new[](size_t size, std::align_val_t alignment) {
  NNF_NEW(static_cast<size_t>(alignment));
}
__attribute__((noinline)) void* operator new(size_t size, std::align_val_t alignment,
                                             const std::nothrow_t&) noexcept {
  NNF_NEW_NOTHROW(static_cast<size_t>(alignment));
}
__attribute__((noinline)) void* operator new[](size_t size, std::align_val_t alignment,
                                               const std::nothrow_t&) noexcept {
  NNF_NEW_NOTHROW(static_cast<size_t>(alignment));
}
__attribute__((noinline)) void operator delete(void* pointer) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete[](void* pointer) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete(void* pointer, size_t) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete[](void* pointer, size_t) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete(void* pointer, const std::nothrow_t&) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete[](void* pointer, const std::nothrow_t&) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete(void* pointer, std::align_val_t) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete[](void* pointer, std::align_val_t) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete(void* pointer, size_t, std::align_val_t) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete[](void* pointer, size_t, std::align_val_t) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete(void* pointer, std::align_val_t,
                                               const std::nothrow_t&) noexcept {
  NNF_DELETE();
}
__attribute__((noinline)) void operator delete[](void* pointer, std::align_val_t,
                                                 const std::nothrow_t&) noexcept {
  NNF_DELETE();
}
#endif  // NNF_ALLOC_INTERPOSER
