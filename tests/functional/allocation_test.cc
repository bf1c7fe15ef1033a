// Zero heap allocations on the hot path: after connecting, registering and a warm-up, a loop of
// isend / irecv / test (32 requests in flight, 8 B to 1 MiB, grouped receives of maxRecvs
// buffers, every byte verified) must not allocate from the plugin.
//
// How allocations are counted: this executable defines malloc, calloc, realloc, reallocarray,
// free, posix_memalign, aligned_alloc, memalign, valloc, pvalloc and every global operator
// new / delete. Definitions in the executable take precedence over libc's and libstdc++'s for
// every library in the process, the dlopen'ed plugin and libfabric included; they forward to
// glibc's __libc_* entry points (never dlsym, which may allocate). While the counter is armed,
// each allocation is counted for the whole process and attributed to a loaded object:
//  - "direct": the object holding the allocation's immediate caller (__builtin_return_address),
//    so operator new called from plugin code counts for the plugin;
//  - "attributed": the same, except that when the immediate caller lies in the C/C++ runtime
//    (libc, libstdc++, libgcc_s, libm, ld.so: e.g. std::string growing, strdup) the stack is
//    unwound to the first frame outside the runtime, which gets the allocation.
// The test asserts that the plugin has zero of both, and prints the whole-process count (which
// includes libfabric's own allocations) as information.
//
// Under AddressSanitizer / ThreadSanitizer the sanitizer owns malloc, so the interposer is left
// out and the test skips itself.
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

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NNF_ALLOC_INTERPOSER 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define NNF_ALLOC_INTERPOSER 0
#endif
#endif
#ifndef NNF_ALLOC_INTERPOSER
#define NNF_ALLOC_INTERPOSER 1
#endif

// ---------------------------------------------------------------------------------------------
// The counter. Everything here is plain static storage: the hooks must never allocate.
// ---------------------------------------------------------------------------------------------
namespace nnf::test::alloc {
namespace {

constexpr int kMaxObjects = 96;
constexpr int kMaxRanges = 256;
constexpr int kMaxFrames = 64;

struct Object {
  char name[160];
  bool runtime;  // libc, libstdc++, libgcc_s, libm, ld.so: unwound through
  bool plugin;
  std::atomic<uint64_t> direct;
  std::atomic<uint64_t> attributed;
};

struct Range {
  uintptr_t begin;
  uintptr_t end;
  int object;
};

Object g_objects[kMaxObjects];
int g_objectCount = 0;
Range g_ranges[kMaxRanges];
int g_rangeCount = 0;
int g_pluginObject = -1;
int g_mainObject = -1;

std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_total{0};        // every allocation while armed, all threads
std::atomic<uint64_t> g_unknown{0};      // immediate caller in no object known at snapshot
std::atomic<uint64_t> g_unresolved{0};   // runtime caller, no non-runtime frame found
std::atomic<uint64_t> g_pluginFrees{0};  // frees whose immediate caller is the plugin
std::atomic<uint64_t> g_frees{0};
// The stacks of the first allocation while armed, and of the first one charged to the plugin,
// for the report (printed with backtrace_symbols_fd, which does not allocate).
struct Stack {
  std::atomic<bool> taken{false};
  void* frames[16];
  int count = 0;
};
Stack g_firstStack;
Stack g_firstPluginStack;
// Reentrancy guard: the unwinder must not be counted (nor recurse) if it ever allocates. TLS of
// the executable itself is static TLS: touching it never allocates.
thread_local bool t_inHook = false;

int objectOf(uintptr_t address) {
  for (int i = 0; i < g_rangeCount; ++i)
    if (address >= g_ranges[i].begin && address < g_ranges[i].end) return g_ranges[i].object;
  return -1;
}

void capture(Stack* stack) {
  if (stack->taken.exchange(true)) return;
  stack->count = backtrace(stack->frames, 16);
}

__attribute__((noinline)) void noteAllocation(void* caller) {
  if (!g_armed.load(std::memory_order_relaxed) || t_inHook) return;
  t_inHook = true;
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
  }
  t_inHook = false;
}

void noteFree(void* pointer, void* caller) {
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

// The plugin's executable range(s), and its whole mapped span (for the data symbol).
struct PluginSpan {
  uintptr_t textBegin = UINTPTR_MAX, textEnd = 0;
  int textRanges = 0;
};
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

void reset() {
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
    char line[256];
    snprintf(line, sizeof(line), "%s%s: direct %llu, attributed %llu", text.empty() ? "" : "; ",
             base != nullptr ? base + 1 : object.name, static_cast<unsigned long long>(direct),
             static_cast<unsigned long long>(attributed));
    text += line;
  }
  char tail[160];
  snprintf(tail, sizeof(tail), "%sunknown caller %llu, runtime unresolved %llu",
           text.empty() ? "" : "; ", static_cast<unsigned long long>(g_unknown.load()),
           static_cast<unsigned long long>(g_unresolved.load()));
  return text + tail;
}

}  // namespace
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
using nnf::test::alloc::noteAllocation;
using nnf::test::alloc::noteFree;

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
  noteAllocation(NNF_CALLER());
  return __libc_malloc(size);
}
__attribute__((noinline)) void* calloc(size_t count, size_t size) noexcept {
  noteAllocation(NNF_CALLER());
  return __libc_calloc(count, size);
}
__attribute__((noinline)) void* realloc(void* pointer, size_t size) noexcept {
  noteAllocation(NNF_CALLER());
  return __libc_realloc(pointer, size);
}
__attribute__((noinline)) void* reallocarray(void* pointer, size_t count, size_t size) noexcept {
  noteAllocation(NNF_CALLER());
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_realloc(pointer, bytes);
}
__attribute__((noinline)) void free(void* pointer) noexcept {
  noteFree(pointer, NNF_CALLER());
  __libc_free(pointer);
}
__attribute__((noinline)) int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  noteAllocation(NNF_CALLER());
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0)
    return EINVAL;
  void* pointer = __libc_memalign(alignment, size);
  if (pointer == nullptr) return ENOMEM;
  *out = pointer;
  return 0;
}
__attribute__((noinline)) void* aligned_alloc(size_t alignment, size_t size) noexcept {
  noteAllocation(NNF_CALLER());
  return __libc_memalign(alignment, size);
}
__attribute__((noinline)) void* memalign(size_t alignment, size_t size) noexcept {
  noteAllocation(NNF_CALLER());
  return __libc_memalign(alignment, size);
}
__attribute__((noinline)) void* valloc(size_t size) noexcept {
  noteAllocation(NNF_CALLER());
  return __libc_valloc(size);
}
__attribute__((noinline)) void* pvalloc(size_t size) noexcept {
  noteAllocation(NNF_CALLER());
  return __libc_pvalloc(size);
}
}  // extern "C"

#define NNF_NEW(alignment)      \
  noteAllocation(NNF_CALLER()); \
  return newOrThrow(size, alignment)
#define NNF_NEW_NOTHROW(alignment) \
  noteAllocation(NNF_CALLER());    \
  return newNoThrow(size, alignment)
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

// ---------------------------------------------------------------------------------------------
// The test.
// ---------------------------------------------------------------------------------------------
namespace nnf::test {
namespace {

constexpr int kWindow = abi::kMaxRequests;  // 32 requests in flight, as NCCL
constexpr int kWarmupOps = 200;
constexpr int kMeasuredOps = 2000;
constexpr int kMaxParts = 8;             // the plugin's maxRecvs is 1..8
constexpr int kPartCapacity = 64 << 10;  // each buffer of a grouped receive
constexpr int kSingleCapacity = 1 << 20;
constexpr size_t kSlotBytes = std::max<size_t>(kSingleCapacity, size_t{kPartCapacity} * kMaxParts);
constexpr int kSingleSizes[4] = {8, 4096, 64 << 10, 1 << 20};
constexpr int kPartSizes[4] = {8, 4096, 64 << 10, 0};  // empty parts are common in NCCL groups
constexpr int kSingleTag = 0x2A;

// What operation `op` is, on both sides: every fifth one is a grouped receive of n buffers
// (n = maxRecvs), the others single messages cycling through the sizes.
struct Shape {
  int parts;
  int size[kMaxParts];
  int capacity[kMaxParts];
  int tag[kMaxParts];
  size_t offset[kMaxParts];
};
Shape shapeOf(int op, int n) {
  Shape shape{};
  if (n > 1 && op % 5 == 4) {
    shape.parts = n;
    for (int j = 0; j < n; ++j) {
      shape.size[j] = kPartSizes[(op / 5 + j) % 4];
      shape.capacity[j] = kPartCapacity;
      shape.tag[j] = 100 + 3 * j;
      shape.offset[j] = size_t{kPartCapacity} * j;
    }
  } else {
    shape.parts = 1;
    shape.size[0] = kSingleSizes[op % 4];
    shape.capacity[0] = kSingleCapacity;
    shape.tag[0] = kSingleTag;
    shape.offset[0] = 0;
  }
  return shape;
}
uint64_t messageId(int op, int part) {
  return 7000000 + uint64_t{16} * op + part;
}

// The outcome of a run of operations; all plain data, filled without allocating.
struct RunResult {
  bool ok = true;
  char error[512] = "";
  uint64_t calls = 0;     // isend + irecv + test calls, NULL-returning ones included
  uint64_t messages = 0;  // sends (sender) or receive buffers (receiver) completed
  uint64_t bytes = 0;
  int badOp = -1, badPart = -1;  // a data mismatch, for the report after disarming
};

struct Slot {
  int op = -1;  // -1: free
  Shape shape;
  int posted = 0;  // parts posted (sender) / 1 once the grouped irecv is posted (receiver)
  void* request[kMaxParts];
  bool done[kMaxParts];
  int left = 0;  // requests not yet completed
};

// Runs operations [first, last) with a sliding window of kWindow operations, posting and
// testing without blocking, as NCCL's proxy does. Nothing here allocates on success.
void runOps(Peer& peer, void* comm, void* mh, uint8_t* buffer, bool sender, int first, int last,
            RunResult* result) {
  const int n = peer.props.maxRecvs;
  Slot slots[kWindow];
  int next = first, completed = 0;
  Deadline deadline(120);
  auto fail = [&](const char* what, int op, int code) {
    result->ok = false;
    snprintf(result->error, sizeof(result->error), "%s (op %d, result %d)", what, op, code);
  };
  while (completed < last - first && result->ok) {
    // Post: the next operation, if its slot is free, as far as the plugin takes it.
    while (next < last) {
      Slot& slot = slots[next % kWindow];
      if (slot.op >= 0 && slot.op != next) break;  // the slot is still busy
      uint8_t* base = buffer + kSlotBytes * (next % kWindow);
      if (slot.op < 0) {
        slot.op = next;
        slot.shape = shapeOf(next, n);
        slot.posted = 0;
        slot.left = sender ? slot.shape.parts : 1;
        for (int j = 0; j < kMaxParts; ++j) slot.done[j] = false;
        if (sender)
          for (int j = 0; j < slot.shape.parts; ++j)
            fillPattern(base + slot.shape.offset[j], slot.shape.size[j], messageId(next, j));
      }
      if (sender) {
        while (slot.posted < slot.shape.parts) {
          int j = slot.posted;
          void* request = nullptr;
          ++result->calls;
          abi::Result code = peer.net->isend(comm, base + slot.shape.offset[j], slot.shape.size[j],
                                             slot.shape.tag[j], mh, &request);
          if (code != abi::kSuccess) return fail("isend failed", next, code);
          if (request == nullptr) break;
          slot.request[j] = request;
          ++slot.posted;
        }
        if (slot.posted < slot.shape.parts) break;
      } else {
        void* data[kMaxParts];
        void* mhandles[kMaxParts];
        for (int j = 0; j < slot.shape.parts; ++j) {
          data[j] = base + slot.shape.offset[j];
          mhandles[j] = mh;
        }
        void* request = nullptr;
        ++result->calls;
        abi::Result code = peer.net->irecv(comm, slot.shape.parts, data, slot.shape.capacity,
                                           slot.shape.tag, mhandles, &request);
        if (code != abi::kSuccess) return fail("irecv failed", next, code);
        if (request == nullptr) break;
        slot.request[0] = request;
        slot.posted = 1;
      }
      ++next;
    }
    // Test every outstanding request once.
    for (Slot& slot : slots) {
      if (slot.op < 0) continue;
      for (int r = 0; r < slot.posted; ++r) {
        if (slot.done[r]) continue;
        int done = 0;
        int sizes[kMaxParts];
        for (int& size : sizes) size = -1;
        ++result->calls;
        abi::Result code = peer.net->test(slot.request[r], &done, sizes);
        if (code != abi::kSuccess) return fail("test failed", slot.op, code);
        if (done == 0) continue;
        slot.done[r] = true;
        --slot.left;
        const uint8_t* base = buffer + kSlotBytes * (slot.op % kWindow);
        if (sender) {
          ++result->messages;
          result->bytes += slot.shape.size[r];
          continue;
        }
        for (int j = 0; j < slot.shape.parts; ++j) {
          if (sizes[j] != slot.shape.size[j]) {
            result->ok = false;
            snprintf(result->error, sizeof(result->error),
                     "op %d buffer %d (tag %d): test reported %d bytes, %d were sent", slot.op, j,
                     slot.shape.tag[j], sizes[j], slot.shape.size[j]);
            return;
          }
          const bool good = static_cast<bool>(verifyPattern(
              base + slot.shape.offset[j], slot.shape.size[j], messageId(slot.op, j)));
          if (!good) {
            result->ok = false;
            result->badOp = slot.op;
            result->badPart = j;
            snprintf(result->error, sizeof(result->error), "op %d buffer %d: wrong data", slot.op,
                     j);
            return;
          }
          ++result->messages;
          result->bytes += slot.shape.size[j];
        }
      }
      if (slot.left == 0 && slot.posted == (sender ? slot.shape.parts : 1)) {
        slot.op = -1;
        ++completed;
      }
    }
    if (deadline.expired()) {
      result->ok = false;
      snprintf(result->error, sizeof(result->error),
               "operations %d..%d not done in 120 s: %d completed, next to post %d", first, last,
               completed, next);
      return;
    }
  }
}

// Checks that the counter counts, that it knows the plugin, and that it sees the plugin's own
// allocations when the plugin makes some. Fatal failures: a broken counter proves nothing.
void checkCounter(Peer& peer) {
  char error[256] = "";
  ASSERT_TRUE(alloc::snapshot(peer.net, error, sizeof(error))) << error;

  // The plugin's text: non-empty, holding its entry points; its mapping holds ncclNetPlugin_v8.
  alloc::PluginSpan span = alloc::pluginText();
  ASSERT_GT(span.textRanges, 0) << "no executable segment found for the plugin";
  ASSERT_LT(span.textBegin, span.textEnd) << "empty plugin text range";
  for (auto entry :
       {reinterpret_cast<uintptr_t>(peer.net->isend), reinterpret_cast<uintptr_t>(peer.net->irecv),
        reinterpret_cast<uintptr_t>(peer.net->test)}) {
    EXPECT_EQ(alloc::objectOf(entry), alloc::g_pluginObject)
        << "an entry point of the plugin lies outside the text found for it";
  }
  Dl_info info{};
  ASSERT_NE(dladdr(peer.net, &info), 0);
  std::pair<uintptr_t, uintptr_t> probe{reinterpret_cast<uintptr_t>(peer.net),
                                        reinterpret_cast<uintptr_t>(info.dli_fbase)};
  EXPECT_EQ(dl_iterate_phdr(alloc::mappedContains, &probe), 1)
      << "ncclNetPlugin_v8 at " << peer.net << " is not inside the plugin's mapping";
  EXPECT_NE(strstr(alloc::g_objects[alloc::g_pluginObject].name, "nccl-net"), nullptr)
      << "the object found for the plugin is " << alloc::g_objects[alloc::g_pluginObject].name;
  ASSERT_GE(alloc::g_mainObject, 0) << "the test executable's text was not found";

#if NNF_ALLOC_INTERPOSER
  // One malloc from the test counts once, for the executable, and never for the plugin. The
  // volatile pointers keep the compiler from eliding the pairs.
  void* (*volatile mallocFn)(size_t) = malloc;
  alloc::arm();
  void* volatile block = mallocFn(64);
  alloc::disarm();
  free(block);
  EXPECT_EQ(alloc::total(), 1u) << "one malloc while armed: " << alloc::breakdown();
  EXPECT_EQ(alloc::mainDirect(), 1u) << alloc::breakdown();
  EXPECT_EQ(alloc::pluginDirect(), 0u);

  alloc::arm();
  int* volatile number = new int(5);
  alloc::disarm();
  delete number;
  EXPECT_EQ(alloc::total(), 1u) << "one operator new while armed: " << alloc::breakdown();
  EXPECT_EQ(alloc::mainDirect(), 1u) << alloc::breakdown();

  // strdup allocates from inside libc: the unwinder must find the test as the owner.
  char* (*volatile strdupFn)(const char*) = strdup;
  alloc::arm();
  char* volatile copy = strdupFn("an allocation made by libc on the test's behalf");
  alloc::disarm();
  free(copy);
  EXPECT_EQ(alloc::total(), 1u) << alloc::breakdown();
  EXPECT_EQ(alloc::mainDirect(), 0u) << "strdup's malloc call comes from libc";
  EXPECT_EQ(alloc::mainAttributed(), 1u)
      << "the unwinder did not find the test behind strdup: " << alloc::breakdown();

  // The plugin allocates when it makes a listen comm: the counter must see it.
  Handle handle;
  void* listenComm = nullptr;
  alloc::arm();
  abi::Result code = peer.net->listen(peer.dev, handle.bytes, &listenComm);
  alloc::disarm();
  ASSERT_EQ(code, abi::kSuccess);
  uint64_t listenAllocations = alloc::pluginAttributed();
  std::string listenBreakdown = alloc::breakdown();
  closeListen(peer, listenComm);
  printf(
      "[alloc] self-check (%s): malloc, operator new and strdup counted once each; listen "
      "made %llu allocation(s) charged to the plugin\n",
      peer.role.c_str(), static_cast<unsigned long long>(listenAllocations));
  fflush(stdout);
  EXPECT_GT(listenAllocations, 0u)
      << "listen made no allocation the counter could attribute to the plugin, so the counter "
         "cannot be trusted to see one in the loop either: "
      << listenBreakdown;
#endif
}

void report(const char* role, const RunResult& result, uint64_t ops) {
  const std::string provider = testProvider().empty() ? "default" : testProvider();
  printf(
      "[alloc] provider %s, %s: plugin %llu (direct caller %llu), whole process %llu over %llu "
      "messages (%llu ops, %llu isend/irecv/test calls, %.1f MiB); plugin frees %llu, "
      "process frees %llu\n"
      "[alloc]   by object: %s\n",
      provider.c_str(), role, static_cast<unsigned long long>(alloc::pluginAttributed()),
      static_cast<unsigned long long>(alloc::pluginDirect()),
      static_cast<unsigned long long>(alloc::total()),
      static_cast<unsigned long long>(result.messages), static_cast<unsigned long long>(ops),
      static_cast<unsigned long long>(result.calls), result.bytes / 1048576.0,
      static_cast<unsigned long long>(alloc::g_pluginFrees.load()),
      static_cast<unsigned long long>(alloc::g_frees.load()), alloc::breakdown().c_str());
  fflush(stdout);
  // Where allocations come from, for whoever has to remove them (symbols of exported functions
  // only; `addr2line -e OBJECT` resolves the rest).
  const alloc::Stack* stacks[] = {&alloc::g_firstPluginStack, &alloc::g_firstStack};
  const char* titles[] = {"first allocation charged to the plugin", "first allocation in the loop"};
  for (int i = 0; i < 2; ++i) {
    if (stacks[i]->count <= 0) continue;
    printf("[alloc]   %s, %s:\n", role, titles[i]);
    fflush(stdout);
    backtrace_symbols_fd(const_cast<void* const*>(stacks[i]->frames), stacks[i]->count,
                         STDOUT_FILENO);
    if (stacks[i] == &alloc::g_firstPluginStack) break;  // the other one is the same or less useful
  }
}

// Warm-up, then the armed loop; asserts zero plugin allocations in it.
void warmUpAndMeasure(Peer& peer, void* comm, void* mh, uint8_t* buffer, bool sender) {
  const char* role = sender ? "sender" : "receiver";
  RunResult warmup;
  runOps(peer, comm, mh, buffer, sender, 0, kWarmupOps, &warmup);
  ASSERT_TRUE(warmup.ok) << role << " warm-up: " << warmup.error;

  RunResult measured;
  alloc::arm();
  runOps(peer, comm, mh, buffer, sender, kWarmupOps, kWarmupOps + kMeasuredOps, &measured);
  alloc::disarm();
  if (measured.badOp >= 0) {
    Shape shape = shapeOf(measured.badOp, peer.props.maxRecvs);
    EXPECT_TRUE(verifyPattern(
        buffer + kSlotBytes * (measured.badOp % kWindow) + shape.offset[measured.badPart],
        shape.size[measured.badPart], messageId(measured.badOp, measured.badPart)))
        << role << " op " << measured.badOp << " buffer " << measured.badPart;
  }
  ASSERT_TRUE(measured.ok) << role << " measured loop: " << measured.error;
  report(role, measured, kMeasuredOps);
  EXPECT_GE(measured.calls, 2000u);
  EXPECT_EQ(alloc::pluginDirect(), 0u)
      << role
      << ": the plugin called an allocator in the isend/irecv/test loop: " << alloc::breakdown();
  EXPECT_EQ(alloc::pluginAttributed(), 0u)
      << role << ": the plugin allocated (through the C/C++ runtime) in the isend/irecv/test "
      << "loop: " << alloc::breakdown();
}

TEST(Allocation, NoneFromThePluginInASteadyIsendIrecvTestLoop) {
#if !NNF_ALLOC_INTERPOSER
  GTEST_SKIP() << "a sanitizer owns malloc in this build: allocations cannot be interposed";
#endif
  auto sender = [&](Peer& peer) {
    ASSERT_LE(peer.props.maxRecvs, kMaxParts);
    ASSERT_NO_FATAL_FAILURE(checkCounter(peer));
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kSlotBytes * kWindow);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    // Objects loaded since the first snapshot (providers' own libraries) get names too.
    char error[256];
    ASSERT_TRUE(alloc::snapshot(peer.net, error, sizeof(error))) << error;
    ASSERT_NO_FATAL_FAILURE(warmUpAndMeasure(peer, comm, mh, buffer.data(), true));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    ASSERT_LE(peer.props.maxRecvs, kMaxParts);
    ASSERT_NO_FATAL_FAILURE(checkCounter(peer));
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kSlotBytes * kWindow);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    char error[256];
    ASSERT_TRUE(alloc::snapshot(peer.net, error, sizeof(error))) << error;
    ASSERT_NO_FATAL_FAILURE(warmUpAndMeasure(peer, comm, mh, buffer.data(), false));
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 240);
}

}  // namespace
}  // namespace nnf::test
