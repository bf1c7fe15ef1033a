// Zero heap allocations on the hot path: after connecting, registering and a warm-up, a loop of
// isend / irecv / test (32 requests in flight, 8 B to 1 MiB, grouped receives of maxRecvs
// buffers, every byte verified) must not allocate from the plugin. The counter and how it
// charges allocations to the plugin: tests/alloc/alloc_counter.h. The test asserts that the
// plugin has zero of both kinds, and prints the whole-process count (which includes libfabric's
// own allocations) as information.
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "alloc/alloc_counter.h"
#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

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
