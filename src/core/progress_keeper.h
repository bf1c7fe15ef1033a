// Keeps a device progressing while nobody else does. Three things need our own progress after the
// application may have stopped calling:
//   - a closed comm's peer can only finish its close once our provider has consumed what it sent
//     (tcp holds a large message in the socket until a receive takes it; shm and efa process
//     incoming packets only when the endpoint is progressed): the drain receives that consume
//     those late messages run only when someone progresses the device, and after the
//     application's last close often nobody does (its ranks wait in a barrier for each other);
//   - a protocol owes its peer writes that NCCL no longer waits for (the rdma sender's voids, a
//     refused send's notice, the close's answer), perhaps held in the engine for want of room;
//   - tcp and efa may keep a post or an inject until the endpoint is progressed again (behind a
//     send the socket has not taken; a packet the target had no buffer for, RNR, which efa sends
//     again), and an injected send is done for NCCL at once: its receiver would wait until this
//     device's next call;
//   - a rail that went down is probed until it works again (Device::probeRails), whoever calls;
//     with nothing else to look after the keeper then sleeps until the next probe is due (at
//     most 1 s), and the next hand-over wakes it at once.
// So the device wakes its keeper on a close, on such a debt, and on the first operation it hands
// the engine after the keeper went idle; the keeper's thread then progresses the device in every
// millisecond in which no other thread did, until nothing is closing or waiting in the engine and
// nothing was handed over, closed or drained for the close bound (NCCL_FABRIC_CLOSE_TIMEOUT_MS);
// then it sleeps until the next wake. While the application progresses the device itself, the
// keeper looks less and less often (up to every 16 ms), and every millisecond again once it has
// had to progress.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace nnf::core {

class Device;

class ProgressKeeper {
 public:
  // `idleNs`: how long after the last sign of activity the keeper stops.
  ProgressKeeper(Device& device, uint64_t idleNs);
  ~ProgressKeeper();  // stops the thread and waits for it
  ProgressKeeper(const ProgressKeeper&) = delete;
  ProgressKeeper& operator=(const ProgressKeeper&) = delete;

  // Something needs progress (device lock held): keep progressing from now on, starting the
  // thread the first time (named "nnf-keeper").
  void wake();
  // Ends the thread for good (the library is being unloaded: its code must not run any more);
  // later wakes do nothing. Device lock not held.
  void stop();
  // Unit tests over the fake fabric (one thread drives both devices): no thread ever starts;
  // wake() still marks the keeper active, and the test calls turnIfDue() where the thread
  // would run, so a device progresses on its own exactly when the real keeper would make it.
  void driveManually() { manual_ = true; }
  // Manual mode: one turn when the keeper is active and a turn's interval has passed on the
  // device's clock (device lock not held).
  void turnIfDue();
  // Progress calls so far: the device counts its own, so that the keeper sees whether another
  // thread progressed meanwhile (device lock held).
  void noteProgress() { ++progressCalls_; }
  // Turns taken so far (device lock held, or manual mode): tests count them.
  uint64_t turns() const { return turns_; }

 private:
  void run();
  // One turn under the device lock (taken without waiting): progresses unless another thread
  // did since the last turn; goes idle (active_ false, the device told) once there is nothing
  // left to keep going.
  void turn();

  Device& device_;
  const uint64_t idleNs_;
  uint64_t progressCalls_ = 0;   // device lock
  uint64_t turns_ = 0;           // device lock
  uint64_t seenCalls_ = 0;       // device lock
  uint64_t seenActivity_ = 0;    // device lock
  uint64_t lastActivityNs_ = 0;  // keeper mutex
  uint64_t intervalNs_;          // keeper mutex: until the next turn
  std::mutex mutex_;
  std::condition_variable wakeUp_;
  bool active_ = false;
  bool kicked_ = false;  // woken during a turn's wait: the wait ends
  bool stop_ = false;
  bool manual_ = false;
  uint64_t lastTurnNs_ = 0;  // manual mode
  int ownerPid_ = 0;         // the process that started the thread
  std::thread thread_;
};

}  // namespace nnf::core
