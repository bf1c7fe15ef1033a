#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "fabric/domain_lock.h"

namespace nnf::fabric {
namespace {

TEST(DomainLock, TryLockFailsWhileHeldAndSucceedsAfterUnlock) {
  DomainLock lock;
  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  std::thread other([&] { EXPECT_FALSE(lock.try_lock()); });
  other.join();
  lock.unlock();
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(DomainLock, KeepsCountersExactUnderContention) {
  // A non-atomic read-modify-write of two fields: any overlap of critical sections shows up as
  // a lost update or as the fields disagreeing.
  DomainLock lock;
  long counter = 0, shadow = 0;
  std::atomic<bool> disagreed{false};
  constexpr int kThreads = 8, kIterations = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIterations; ++i) {
        std::lock_guard<DomainLock> guard(lock);
        if (counter != shadow) disagreed = true;
        ++counter;
        ++shadow;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_FALSE(disagreed.load());
  EXPECT_EQ(counter, long{kThreads} * kIterations);
  EXPECT_EQ(shadow, counter);
}

TEST(DomainLock, WaiterSleepsThroughALongHoldAndGetsTheLock) {
  // A holder that keeps the lock far longer than the spin phase pushes the waiter onto the
  // futex; the unlock must wake it, or this test hangs until ctest's timeout.
  DomainLock lock;
  lock.lock();
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    std::lock_guard<DomainLock> guard(lock);
    acquired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(acquired.load());
  lock.unlock();
  waiter.join();
  EXPECT_TRUE(acquired.load());
  // Left free, marks of the past waiter notwithstanding.
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(DomainLock, ManySleepersAreAllWokenInTurn) {
  DomainLock lock;
  lock.lock();
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < 6; ++t) {
    waiters.emplace_back([&] {
      std::lock_guard<DomainLock> guard(lock);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ++done;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(done.load(), 0);
  lock.unlock();
  for (auto& waiter : waiters) waiter.join();
  EXPECT_EQ(done.load(), 6);
}

}  // namespace
}  // namespace nnf::fabric
