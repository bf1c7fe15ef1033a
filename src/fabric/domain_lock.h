// The lock that FI_THREAD_DOMAIN asks of us: it serialises every call into one domain (its
// endpoint, CQ, AV and registrations).
//
// Why not std::mutex: NCCL's proxy thread calls test() in a tight loop, and on an idle poll the
// lock was a third of the plugin's instructions (glibc's pthread_mutex_lock/unlock, ~110
// instructions against ~10 here). The lock is nearly never contended (one proxy thread per
// device, a service thread now and then), so the uncontended path is one compare-and-swap and
// one exchange; a waiter spins briefly, then sleeps on a futex, so a long registration held by
// one thread does not burn another's CPU.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace nnf::fabric {

class DomainLock {
 public:
  DomainLock() = default;
  DomainLock(const DomainLock&) = delete;
  DomainLock& operator=(const DomainLock&) = delete;

  void lock() noexcept {
    uint32_t expected = kFree;
    if (!state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                        std::memory_order_relaxed))
      lockContended();
  }

  bool try_lock() noexcept {
    uint32_t expected = kFree;
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() noexcept {
    if (state_.exchange(kFree, std::memory_order_release) == kSleepers) wakeOne();
  }

 private:
  // kSleepers: held, and someone may be asleep on the futex (unlock must wake one).
  static constexpr uint32_t kFree = 0, kLocked = 1, kSleepers = 2;
  static constexpr int kSpins = 100;

  void lockContended() noexcept {
    // Critical sections are short on the data path: a brief spin usually wins.
    for (int i = 0; i < kSpins; ++i) {
      if (state_.load(std::memory_order_relaxed) == kFree && try_lock()) return;
      cpuRelax();
    }
    // Announce a sleeper; whoever unlocks after this wakes one. Taking the lock in the same
    // exchange leaves it marked kSleepers, which costs at most one spurious wake.
    while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree)
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, kSleepers,
              nullptr, nullptr, 0);
  }

  static void cpuRelax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }

  void wakeOne() noexcept {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
  }

  std::atomic<uint32_t> state_{kFree};
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                    std::atomic<uint32_t>::is_always_lock_free,
                "the futex word must be a plain 32-bit integer");
};

}  // namespace nnf::fabric
