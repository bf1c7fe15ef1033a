// MrCache over a recording fake registrar: hits, misses, sub-ranges, overlaps, reference
// counts, the kept-entry bounds and concurrency. Addresses are never dereferenced here, so plain
// numbers serve as buffers.
#include "memory/mr_cache.h"

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "support/recording_registrar.h"

namespace nnf::memory {
namespace {

using test::RecordingRegistrar;

constexpr size_t kPage = 4096;
constexpr uintptr_t kBase = 0x10000000;
constexpr uint64_t kLocal = FI_SEND | FI_RECV;

const void* at(uintptr_t address) {
  return reinterpret_cast<const void*>(address);
}

Region host(uintptr_t address, size_t length, uint64_t access = kLocal) {
  Region region;
  region.base = at(address);
  region.length = length;
  region.access = access;
  return region;
}

Region cuda(uintptr_t address, size_t length, int device) {
  Region region = host(address, length);
  region.type = MemType::kCuda;
  region.device = device;
  return region;
}

MrCacheOptions options(size_t keptEntries = 0, size_t keptBytes = 0, bool enabled = true) {
  MrCacheOptions result;
  result.enabled = enabled;
  result.maxKeptEntries = keptEntries;
  result.maxKeptBytes = keptBytes;
  result.pageSize = kPage;
  return result;
}

class MrCacheTest : public ::testing::Test {
 protected:
  RecordingRegistrar registrar_;

  // The last registration call the registrar saw.
  RecordingRegistrar::Call lastRegistration() const {
    auto calls = registrar_.calls();
    for (auto it = calls.rbegin(); it != calls.rend(); ++it)
      if (it->registration) return *it;
    ADD_FAILURE() << "no registration recorded";
    return {};
  }
};

TEST_F(MrCacheTest, SecondAcquireOfSameRangeIsAHit) {
  MrCache cache(registrar_, options());
  MrHandle* first = nullptr;
  MrHandle* second = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, 8 * kPage), &first), 0);
  ASSERT_EQ(cache.acquire(host(kBase, 8 * kPage), &second), 0);
  EXPECT_EQ(first, second);
  EXPECT_EQ(registrar_.registrations(), 1u);
  MrCacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.live, 1u);
}

TEST_F(MrCacheTest, SubRangeIsAHitWithTheRightRemoteAddress) {
  MrCache cache(registrar_, options());
  MrHandle* whole = nullptr;
  MrHandle* part = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, 16 * kPage), &whole), 0);
  ASSERT_EQ(cache.acquire(host(kBase + 3 * kPage + 100, 200), &part), 0);
  EXPECT_EQ(part, whole);
  EXPECT_EQ(registrar_.registrations(), 1u);
  EXPECT_EQ(cache.stats().hits, 1u);
  // The fake registrar addresses by virtual address, so the remote address is the pointer.
  EXPECT_EQ(part->registration().remoteAddress(at(kBase + 3 * kPage + 100)),
            kBase + 3 * kPage + 100);
}

TEST_F(MrCacheTest, RangesArePageAligned) {
  MrCache cache(registrar_, options());
  MrHandle* handle = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase + 0x10, 10), &handle), 0);
  EXPECT_EQ(lastRegistration().base, at(kBase));
  EXPECT_EQ(lastRegistration().length, kPage);
  // Straddling a page boundary takes both pages.
  ASSERT_EQ(cache.acquire(host(kBase + 4 * kPage - 8, 16), &handle), 0);
  EXPECT_EQ(lastRegistration().base, at(kBase + 3 * kPage));
  EXPECT_EQ(lastRegistration().length, 2 * kPage);
}

TEST_F(MrCacheTest, ZeroLengthGetsItsPageAndNullIsRefused) {
  MrCache cache(registrar_, options());
  MrHandle* handle = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase + 5, 0), &handle), 0);
  EXPECT_EQ(lastRegistration().length, kPage);
  EXPECT_EQ(cache.acquire(host(0, 100), &handle), -FI_EINVAL);
  EXPECT_EQ(cache.acquire(host(kBase, 8), nullptr), -FI_EINVAL);
  EXPECT_EQ(registrar_.registrations(), 1u);
}

TEST_F(MrCacheTest, MemoryTypeAndDeviceMustMatch) {
  MrCache cache(registrar_, options());
  MrHandle* hostHandle = nullptr;
  MrHandle* gpu0 = nullptr;
  MrHandle* gpu1 = nullptr;
  MrHandle* again = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, 4 * kPage), &hostHandle), 0);
  ASSERT_EQ(cache.acquire(cuda(kBase, 4 * kPage, 0), &gpu0), 0);
  ASSERT_EQ(cache.acquire(cuda(kBase, 4 * kPage, 1), &gpu1), 0);
  ASSERT_EQ(cache.acquire(cuda(kBase + kPage, kPage, 0), &again), 0);
  EXPECT_NE(hostHandle, gpu0);
  EXPECT_NE(gpu0, gpu1);
  EXPECT_EQ(again, gpu0);
  EXPECT_EQ(gpu1->device(), 1);
  EXPECT_EQ(gpu0->type(), MemType::kCuda);
  EXPECT_EQ(registrar_.registrations(), 3u);
  EXPECT_EQ(lastRegistration().device, 1);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 3u);
}

TEST_F(MrCacheTest, MissingAccessBitsRegisterTheUnionOfAccess) {
  MrCache cache(registrar_, options());
  MrHandle* local = nullptr;
  MrHandle* remote = nullptr;
  MrHandle* both = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, kPage, kLocal), &local), 0);
  ASSERT_EQ(cache.acquire(host(kBase, kPage, FI_REMOTE_WRITE), &remote), 0);
  EXPECT_NE(local, remote);
  EXPECT_EQ(lastRegistration().access, kLocal | FI_REMOTE_WRITE);
  ASSERT_EQ(cache.acquire(host(kBase, kPage, kLocal), &both), 0);
  EXPECT_EQ(both, remote);
  EXPECT_EQ(registrar_.registrations(), 2u);
}

TEST_F(MrCacheTest, OverlappingHostRangesRegisterTheUnion) {
  MrCache cache(registrar_, options());
  MrHandle* first = nullptr;
  MrHandle* second = nullptr;
  MrHandle* whole = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, 2 * kPage), &first), 0);
  ASSERT_EQ(cache.acquire(host(kBase + kPage, 3 * kPage), &second), 0);
  EXPECT_NE(first, second);
  EXPECT_EQ(lastRegistration().base, at(kBase));
  EXPECT_EQ(lastRegistration().length, 4 * kPage);
  // The union serves the whole span; the first entry stays valid for its holder.
  ASSERT_EQ(cache.acquire(host(kBase, 4 * kPage), &whole), 0);
  EXPECT_EQ(whole, second);
  EXPECT_EQ(first->registration().length, 2 * kPage);
  EXPECT_EQ(cache.stats().live, 2u);
  // Out of the index, the first entry goes with its last release even when keeping is on.
  ASSERT_EQ(cache.release(first), 0);
  EXPECT_EQ(registrar_.deregistrations(), 1u);
  EXPECT_EQ(cache.stats().live, 1u);
}

TEST_F(MrCacheTest, OverlappingDeviceRangesRegisterOnlyTheRequest) {
  MrCache cache(registrar_, options());
  MrHandle* first = nullptr;
  MrHandle* second = nullptr;
  ASSERT_EQ(cache.acquire(cuda(kBase, 2 * kPage, 0), &first), 0);
  ASSERT_EQ(cache.acquire(cuda(kBase + kPage, 3 * kPage, 0), &second), 0);
  EXPECT_EQ(lastRegistration().base, at(kBase + kPage));
  EXPECT_EQ(lastRegistration().length, 3 * kPage);
  // The first entry left the index: its range now misses and registers anew.
  MrHandle* third = nullptr;
  ASSERT_EQ(cache.acquire(cuda(kBase, kPage, 0), &third), 0);
  EXPECT_NE(third, first);
  EXPECT_EQ(registrar_.registrations(), 3u);
}

TEST_F(MrCacheTest, OverlappedKeptEntryIsReleasedAtOnce) {
  MrCache cache(registrar_, options(4));
  MrHandle* first = nullptr;
  MrHandle* second = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, 2 * kPage), &first), 0);
  ASSERT_EQ(cache.release(first), 0);
  EXPECT_EQ(cache.stats().kept, 1u);
  ASSERT_EQ(cache.acquire(host(kBase + kPage, 2 * kPage), &second), 0);
  EXPECT_EQ(registrar_.deregistrations(), 1u);
  EXPECT_EQ(cache.stats().kept, 0u);
  EXPECT_EQ(cache.stats().live, 1u);
  EXPECT_EQ(cache.stats().evictions, 0u);
}

TEST_F(MrCacheTest, DmaBufRangesStayExact) {
  MrCache cache(registrar_, options());
  Region region = cuda(kBase + 0x10, 100, 0);
  region.type = MemType::kDmaBuf;
  region.dmabufFd = 7;
  region.dmabufOffset = 0x10;
  MrHandle* handle = nullptr;
  ASSERT_EQ(cache.acquire(region, &handle), 0);
  EXPECT_EQ(lastRegistration().base, at(kBase + 0x10));
  EXPECT_EQ(lastRegistration().length, 100u);
  EXPECT_EQ(lastRegistration().type, MemType::kDmaBuf);
}

TEST_F(MrCacheTest, DefaultReleasesOnLastReference) {
  MrCache cache(registrar_, options());
  MrHandle* a = nullptr;
  MrHandle* b = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &a), 0);
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &b), 0);
  ASSERT_EQ(cache.release(a), 0);
  EXPECT_EQ(registrar_.deregistrations(), 0u);
  EXPECT_EQ(cache.stats().live, 1u);
  ASSERT_EQ(cache.release(b), 0);
  EXPECT_EQ(registrar_.deregistrations(), 1u);
  MrCacheStats stats = cache.stats();
  EXPECT_EQ(stats.live, 0u);
  EXPECT_EQ(stats.kept, 0u);
  EXPECT_EQ(stats.evictions, 0u);
}

TEST_F(MrCacheTest, KeptEntryIsReused) {
  MrCache cache(registrar_, options(2));
  MrHandle* a = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, 2 * kPage), &a), 0);
  ASSERT_EQ(cache.release(a), 0);
  EXPECT_EQ(cache.stats().kept, 1u);
  EXPECT_EQ(cache.stats().keptBytes, 2 * kPage);
  EXPECT_EQ(cache.stats().live, 1u);
  MrHandle* again = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase + kPage, 10), &again), 0);
  EXPECT_EQ(again, a);
  EXPECT_EQ(cache.stats().kept, 0u);
  EXPECT_EQ(registrar_.registrations(), 1u);
  EXPECT_EQ(registrar_.deregistrations(), 0u);
}

TEST_F(MrCacheTest, EntryBoundEvictsLeastRecentlyUsed) {
  MrCache cache(registrar_, options(2));
  MrHandle* handles[3] = {};
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(cache.acquire(host(kBase + i * 16 * kPage, kPage), &handles[i]), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cache.release(handles[i]), 0);
  MrCacheStats stats = cache.stats();
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.kept, 2u);
  EXPECT_EQ(stats.live, 2u);
  auto calls = registrar_.calls();
  ASSERT_FALSE(calls.back().registration);
  EXPECT_EQ(calls.back().base, at(kBase));  // the first released, least recently used
  // The survivors hit; the evicted one misses.
  MrHandle* handle = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase + 16 * kPage, kPage), &handle), 0);
  EXPECT_EQ(cache.stats().hits, 1u);
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &handle), 0);
  EXPECT_EQ(cache.stats().misses, 4u);
}

TEST_F(MrCacheTest, ByteBoundEvicts) {
  MrCache cache(registrar_, options(10, 3 * kPage));
  MrHandle* a = nullptr;
  MrHandle* b = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, 2 * kPage), &a), 0);
  ASSERT_EQ(cache.acquire(host(kBase + 16 * kPage, 2 * kPage), &b), 0);
  ASSERT_EQ(cache.release(a), 0);
  EXPECT_EQ(cache.stats().evictions, 0u);
  ASSERT_EQ(cache.release(b), 0);
  MrCacheStats stats = cache.stats();
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.kept, 1u);
  EXPECT_EQ(stats.keptBytes, 2 * kPage);
  EXPECT_EQ(registrar_.calls().back().base, at(kBase));
}

TEST_F(MrCacheTest, ReferencedEntriesAreNeverEvicted) {
  MrCache cache(registrar_, options(1, kPage));
  std::vector<MrHandle*> handles(5);
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(cache.acquire(host(kBase + i * 16 * kPage, 4 * kPage), &handles[i]), 0);
  MrCacheStats stats = cache.stats();
  EXPECT_EQ(stats.live, 5u);
  EXPECT_EQ(stats.evictions, 0u);
  EXPECT_EQ(registrar_.deregistrations(), 0u);
  cache.trimAll();
  EXPECT_EQ(cache.stats().live, 5u);
}

TEST_F(MrCacheTest, TrimAllDropsKeptEntries) {
  MrCache cache(registrar_, options(8));
  MrHandle* a = nullptr;
  MrHandle* b = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &a), 0);
  ASSERT_EQ(cache.acquire(host(kBase + 16 * kPage, kPage), &b), 0);
  ASSERT_EQ(cache.release(a), 0);
  cache.trimAll();
  EXPECT_EQ(cache.stats().live, 1u);
  EXPECT_EQ(cache.stats().kept, 0u);
  EXPECT_EQ(registrar_.deregistrations(), 1u);
}

TEST_F(MrCacheTest, DisabledCacheRegistersEveryTime) {
  MrCache cache(registrar_, options(8, 0, /*enabled=*/false));
  MrHandle* a = nullptr;
  MrHandle* b = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &a), 0);
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &b), 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(registrar_.registrations(), 2u);
  EXPECT_EQ(cache.stats().hits, 0u);
  EXPECT_EQ(cache.stats().misses, 2u);
  ASSERT_EQ(cache.release(a), 0);
  ASSERT_EQ(cache.release(b), 0);
  EXPECT_EQ(registrar_.deregistrations(), 2u);
  EXPECT_EQ(cache.stats().kept, 0u);
}

TEST_F(MrCacheTest, UnknownAndDoubleReleasesAreRefused) {
  MrCache cache(registrar_, options());
  MrHandle* handle = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &handle), 0);
  auto* bogus = reinterpret_cast<MrHandle*>(uintptr_t{0xdead0000});
  EXPECT_EQ(cache.release(bogus), -FI_EINVAL);
  EXPECT_EQ(cache.release(nullptr), -FI_EINVAL);
  EXPECT_EQ(cache.release(handle), 0);
  EXPECT_EQ(cache.release(handle), -FI_EINVAL);
  EXPECT_EQ(registrar_.deregistrations(), 1u);
}

TEST_F(MrCacheTest, DoubleReleaseOfAKeptEntryIsRefused) {
  // A kept entry stays indexed with no reference left: a second release must be refused, not
  // keep it twice (it would sit in the LRU list twice and be deregistered twice).
  MrCache cache(registrar_, options(4));
  MrHandle* handle = nullptr;
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &handle), 0);
  ASSERT_EQ(cache.release(handle), 0);
  ASSERT_EQ(cache.stats().kept, 1u);
  EXPECT_EQ(cache.release(handle), -FI_EINVAL);
  EXPECT_EQ(cache.stats().kept, 1u);
  EXPECT_EQ(cache.stats().keptBytes, kPage);
  cache.trimAll();
  EXPECT_EQ(cache.stats().live, 0u);
  EXPECT_EQ(registrar_.deregistrations(), 1u);
}

TEST_F(MrCacheTest, RegistrarFailureIsReturnedAndLeavesNothingBehind) {
  MrCache cache(registrar_, options());
  registrar_.failNext(-FI_ENOMEM);
  MrHandle* handle = nullptr;
  EXPECT_EQ(cache.acquire(host(kBase, kPage), &handle), -FI_ENOMEM);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(cache.stats().live, 0u);
  ASSERT_EQ(cache.acquire(host(kBase, kPage), &handle), 0);
  EXPECT_EQ(cache.stats().live, 1u);
  EXPECT_EQ(cache.stats().misses, 2u);
}

TEST_F(MrCacheTest, DestructorDeregistersEverything) {
  {
    MrCache cache(registrar_, options(4));
    MrHandle* held = nullptr;
    MrHandle* kept = nullptr;
    ASSERT_EQ(cache.acquire(host(kBase, kPage), &held), 0);
    ASSERT_EQ(cache.acquire(host(kBase + 16 * kPage, kPage), &kept), 0);
    ASSERT_EQ(cache.release(kept), 0);
  }
  EXPECT_EQ(registrar_.registrations(), 2u);
  EXPECT_EQ(registrar_.live(), 0);
}

TEST_F(MrCacheTest, OptionsFromConfiguration) {
  std::map<std::string, std::string> env = {{"NCCL_FABRIC_MR_CACHE", "0"},
                                            {"NCCL_FABRIC_MR_CACHE_MAX_ENTRIES", "5"},
                                            {"NCCL_FABRIC_MR_CACHE_MAX_BYTES", "2M"}};
  auto config = config::Config::load([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  MrCacheOptions result = MrCacheOptions::fromConfig(config);
  EXPECT_FALSE(result.enabled);
  EXPECT_EQ(result.maxKeptEntries, 5u);
  EXPECT_EQ(result.maxKeptBytes, size_t{2} << 20);
  auto defaults = MrCacheOptions::fromConfig(
      config::Config::load([](const char*) -> const char* { return nullptr; }));
  EXPECT_TRUE(defaults.enabled);
  EXPECT_EQ(defaults.maxKeptEntries, 0u);
  EXPECT_EQ(defaults.maxKeptBytes, 0u);
}

// Several threads acquire sub-ranges of shared buffers and private ones, check that the handle
// covers what they asked for, and release. Whatever the interleaving, every registration is
// deregistered in the end and every acquire is counted once.
void hammer(size_t keptEntries) {
  RecordingRegistrar registrar;
  constexpr int kThreads = 8;
  constexpr int kIterations = 3000;
  std::atomic<int> wrong{0};
  {
    MrCache cache(registrar, options(keptEntries));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 random(t);
        std::vector<MrHandle*> held;
        for (int i = 0; i < kIterations; ++i) {
          bool shared = random() % 2 == 0;
          uintptr_t buffer =
              shared ? kBase + (random() % 4) * 64 * kPage : kBase + (64 + t) * 64 * kPage;
          uintptr_t start = buffer + random() % (32 * kPage);
          size_t length = 1 + random() % (16 * kPage);
          MemType type = random() % 4 == 0 ? MemType::kCuda : MemType::kHost;
          Region region = host(start, length);
          region.type = type;
          region.device = type == MemType::kCuda ? 0 : -1;
          MrHandle* handle = nullptr;
          if (cache.acquire(region, &handle) != 0) {
            ++wrong;
            continue;
          }
          const Registration& reg = handle->registration();
          auto regStart = reinterpret_cast<uintptr_t>(reg.base);
          if (regStart > start || regStart + reg.length < start + length || handle->type() != type)
            ++wrong;
          held.push_back(handle);
          if (held.size() > 3 || random() % 2 == 0) {
            size_t victim = random() % held.size();
            if (cache.release(held[victim]) != 0) ++wrong;
            held.erase(held.begin() + victim);
          }
        }
        for (MrHandle* handle : held)
          if (cache.release(handle) != 0) ++wrong;
      });
    }
    for (auto& thread : threads) thread.join();
    MrCacheStats stats = cache.stats();
    EXPECT_EQ(stats.hits + stats.misses, uint64_t{kThreads} * kIterations);
    EXPECT_GT(stats.hits, 0u);
    EXPECT_LE(stats.kept, keptEntries);
    EXPECT_EQ(stats.live, stats.kept);
    EXPECT_EQ(static_cast<uint64_t>(registrar.live()), stats.live);
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(registrar.live(), 0);
}

TEST(MrCacheThreads, ConcurrentAcquireReleaseWithoutKeeping) {
  hammer(0);
}
TEST(MrCacheThreads, ConcurrentAcquireReleaseWithKeeping) {
  hammer(6);
}

}  // namespace
}  // namespace nnf::memory
