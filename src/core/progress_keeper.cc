#include "core/progress_keeper.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <system_error>

#include "core/device.h"
#include "log/log.h"

namespace nnf::core {
namespace {
// Often enough that a peer's close waits about a millisecond longer than it would with an
// application thread progressing; rarely enough to cost nothing measurable.
constexpr auto kTurn = std::chrono::milliseconds(1);
}  // namespace

ProgressKeeper::ProgressKeeper(Device& device, uint64_t idleNs)
    : device_(device), idleNs_(idleNs) {}

ProgressKeeper::~ProgressKeeper() {
  if (thread_.joinable() && getpid() != ownerPid_) {
    // A forked child (a data-loader worker) has no such thread, and its mutex may have been
    // held at the fork: it must neither lock, join nor end a joinable std::thread, so the handle
    // is left behind.
    new std::thread(std::move(thread_));  // NOLINT: deliberately never destroyed
    return;
  }
  stop();
}

void ProgressKeeper::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wakeUp_.notify_all();
  if (thread_.joinable() && getpid() == ownerPid_) thread_.join();
}

void ProgressKeeper::wake() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stop_) return;
  lastActivityNs_ = device_.nowNs();
  active_ = true;
  if (manual_) return;
  if (!thread_.joinable()) {
    try {
      ownerPid_ = getpid();
      thread_ = std::thread([this] { run(); });
      pthread_setname_np(thread_.native_handle(), "nnf-keeper");
    } catch (const std::system_error& error) {
      // Closes still work; a peer's close may then wait for our application to progress.
      active_ = false;
      NNF_WARN("device %d: cannot start the thread that drains closed comms: %s", device_.index(),
               error.what());
      return;
    }
  }
  wakeUp_.notify_one();
}

void ProgressKeeper::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!active_) {
      wakeUp_.wait(lock, [this] { return stop_ || active_; });
      continue;
    }
    wakeUp_.wait_for(lock, kTurn, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    bool needed = turn();
    lock.lock();
    // A close meanwhile (wake) renewed lastActivityNs_: the keeper goes on.
    if (!needed && device_.nowNs() - lastActivityNs_ >= idleNs_) active_ = false;
  }
}

void ProgressKeeper::turnIfDue() {
  uint64_t now = device_.nowNs();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!manual_ || stop_ || !active_ ||
        now - lastTurnNs_ < static_cast<uint64_t>(std::chrono::nanoseconds(kTurn).count())) {
      return;
    }
    lastTurnNs_ = now;
  }
  bool needed = turn();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!needed && device_.nowNs() - lastActivityNs_ >= idleNs_) active_ = false;
}

bool ProgressKeeper::turn() {
  Device& device = device_;
  if (!device.domainLock().try_lock()) return true;  // someone is progressing right now
  if (progressCalls_ == seenCalls_) device.progress();
  seenCalls_ = progressCalls_;
  uint64_t activity = device.drains().discarded() + device.closingCount();
  bool closing = device.closingCount() > 0;
  device.domainLock().unlock();
  if (activity != seenActivity_ || closing) {
    seenActivity_ = activity;
    std::lock_guard<std::mutex> lock(mutex_);
    lastActivityNs_ = device_.nowNs();
  }
  return closing;
}

}  // namespace nnf::core
