#include "core/progress_keeper.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <system_error>

#include "core/device.h"
#include "log/log.h"

namespace nnf::core {
namespace {
// Often enough that a peer's close, or a receiver of our last inject, waits about a millisecond
// longer than it would with an application thread progressing; rarely enough to cost nothing
// measurable.
constexpr uint64_t kTurnNs = 1000000;
// While other threads progress the device the keeper is not needed: it looks less often, up to
// this interval (the longest a receiver waits once our application stops calling).
constexpr uint64_t kLongestTurnNs = 16 * kTurnNs;
// With nothing but a down rail to look after, the keeper sleeps until its probe is due, at most
// this long (a probe interval set longer is still kept, one turn late at most).
constexpr uint64_t kLongestProbeWaitNs = 1000 * kTurnNs;
}  // namespace

ProgressKeeper::ProgressKeeper(Device& device, uint64_t idleNs)
    : device_(device), idleNs_(idleNs), intervalNs_(kTurnNs) {}

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
  // Out of a long sleep for a down rail's probe: look within a turn again.
  intervalNs_ = kTurnNs;
  kicked_ = true;
  if (manual_) return;
  if (!thread_.joinable()) {
    try {
      ownerPid_ = getpid();
      thread_ = std::thread([this] { run(); });
      pthread_setname_np(thread_.native_handle(), "nnf-keeper");
    } catch (const std::system_error& error) {
      // Everything still works while the application calls; after its last call, what the
      // provider holds waits for its next one.
      active_ = false;
      NNF_WARN("device %d: cannot start its progress keeper thread: %s", device_.index(),
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
    kicked_ = false;
    wakeUp_.wait_for(lock, std::chrono::nanoseconds(intervalNs_),
                     [this] { return stop_ || kicked_; });
    if (stop_) break;
    lock.unlock();
    turn();
    lock.lock();
  }
}

void ProgressKeeper::turnIfDue() {
  uint64_t now = device_.nowNs();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!manual_ || stop_ || !active_ || now - lastTurnNs_ < intervalNs_) return;
    lastTurnNs_ = now;
  }
  turn();
}

void ProgressKeeper::turn() {
  Device& device = device_;
  if (!device.domainLock().try_lock()) return;  // someone is progressing right now
  ++turns_;
  bool othersProgressed = progressCalls_ != seenCalls_;
  if (!othersProgressed) device.progress();
  seenCalls_ = progressCalls_;
  // What renews the keeper's time: operations handed over, closes begun or ended, late messages
  // drained; what keeps it going regardless: comms still closing, operations waiting for room.
  // A rail that is down is probed from here (its probe, when due, is posted now, and is not
  // activity: Device::postFromKeeper).
  uint64_t probeWaitNs = device.probeRails();
  uint64_t activity =
      device.handedOverCount() + device.drains().discarded() + device.closingCount();
  bool needed = device.closingCount() > 0 || device.engineHoldsWaiting();
  bool renewed = activity != seenActivity_ || needed;
  seenActivity_ = activity;
  uint64_t now = device.nowNs();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (renewed) lastActivityNs_ = now;
    intervalNs_ = othersProgressed ? std::min(intervalNs_ * 2, kLongestTurnNs) : kTurnNs;
    // Decided under both locks: a hand-over after this wakes the keeper again (the device lock
    // orders it after keeperWentIdle), a close or a debt meanwhile renewed lastActivityNs_.
    if (now - lastActivityNs_ >= idleNs_) {
      // Only a down rail keeps it: it looks when the rail's probe is due, or every millisecond
      // while a probe is in flight (nobody else may read its answer). Either way the next
      // hand-over wakes it (wake() cuts a sleep short).
      active_ = probeWaitNs != UINT64_MAX;
      intervalNs_ = active_ ? std::clamp(probeWaitNs, kTurnNs, kLongestProbeWaitNs) : kTurnNs;
      device.keeperWentIdle();
    }
  }
  device.domainLock().unlock();
}

}  // namespace nnf::core
