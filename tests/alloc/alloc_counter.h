// Counts heap allocations in a test process and charges each to the loaded object that made it,
// so that a test can bound what the plugin itself allocates, whatever libfabric or the machine's
// load add beside it.
//
// How: the object library nnf_alloc_counter defines malloc, calloc, realloc, reallocarray, free,
// posix_memalign, aligned_alloc, memalign, valloc, pvalloc and every global operator new /
// delete. Definitions in the executable take precedence over libc's and libstdc++'s for every
// library in the process, the dlopen'ed plugin and libfabric included; they forward to glibc's
// __libc_* entry points (never dlsym, which may allocate). While the counter is armed, each
// allocation is counted for the whole process and attributed to a loaded object:
//  - "direct": the object holding the allocation's immediate caller (__builtin_return_address),
//    so operator new called from plugin code counts for the plugin;
//  - "attributed": the same, except that when the immediate caller lies in the C/C++ runtime
//    (libc, libstdc++, libgcc_s, libm, ld.so: e.g. std::string growing, strdup) the stack is
//    unwound to the first frame outside the runtime, which gets the allocation.
// Allocations charged to the plugin while armed are remembered (address and usable size) until
// they are freed, armed or not: pluginLiveBytes() is what the plugin still holds of them.
//
// Only executables that link nnf_alloc_counter get the interposer (allocation_test, scale_test).
// Under AddressSanitizer / ThreadSanitizer the sanitizer owns malloc: kInterposed is false and
// the counts stay zero.
#pragma once

#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

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

namespace nnf::test::alloc {

constexpr bool kInterposed = NNF_ALLOC_INTERPOSER != 0;

constexpr int kMaxObjects = 96;
struct Object {
  char name[160];
  bool runtime;  // libc, libstdc++, libgcc_s, libm, ld.so: unwound through
  bool plugin;
  std::atomic<uint64_t> direct;
  std::atomic<uint64_t> attributed;
};
extern Object g_objects[kMaxObjects];
extern int g_pluginObject;  // index in g_objects, -1 before snapshot()
extern int g_mainObject;
extern std::atomic<uint64_t> g_pluginFrees;  // frees whose immediate caller is the plugin
extern std::atomic<uint64_t> g_frees;

// The stack of the first allocation while armed, and of the first one charged to the plugin,
// for reports (print with backtrace_symbols_fd, which does not allocate).
struct Stack {
  std::atomic<bool> taken{false};
  void* frames[16];
  int count = 0;
};
extern Stack g_firstStack;
extern Stack g_firstPluginStack;

// Records every loaded object's executable segments; `pluginAddress` is any address inside the
// plugin (its ncclNetPlugin_v8 table). Call unarmed, after the plugin is loaded, and again after
// providers loaded libraries of their own.
bool snapshot(const void* pluginAddress, char* error, size_t errorSize);
// The object whose text holds `address`, or -1.
int objectOf(uintptr_t address);

// The plugin's executable range(s).
struct PluginSpan {
  uintptr_t textBegin = UINTPTR_MAX, textEnd = 0;
  int textRanges = 0;
};
PluginSpan pluginText();
// dl_iterate_phdr callback: 1 when the address `data` points to ({address, load base}) lies in
// the object of that base.
int mappedContains(dl_phdr_info* info, size_t size, void* data);

// Zeroes the counts and starts counting; disarm() stops. The plugin's live allocations are kept
// across both (see pluginLiveBytes).
void arm();
void disarm();

uint64_t total();
uint64_t pluginDirect();
uint64_t pluginAttributed();
uint64_t mainAttributed();
uint64_t mainDirect();
// Bytes (usable sizes) of the allocations charged to the plugin while armed that are not freed
// yet; false when more were live at once than the counter can remember.
uint64_t pluginLiveBytes();
bool pluginLiveOverflowed();
// "libfabric.so.1: direct 10, attributed 12; ..." for the objects that allocated (unarmed: this
// allocates).
std::string breakdown();

}  // namespace nnf::test::alloc
