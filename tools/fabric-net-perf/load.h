// Busy-looping processes beside the measured ranks (--load N): the machine a user's proxy
// thread shares with the training job's threads. The plugin and the raw baseline run under the
// same load in the same run, so the ratio still compares like with like.
#pragma once

#include <sys/types.h>

#include <vector>

namespace nnf::perf {

class BusyLoad {
 public:
  BusyLoad() = default;
  BusyLoad(const BusyLoad&) = delete;
  BusyLoad& operator=(const BusyLoad&) = delete;
  ~BusyLoad() { stop(); }

  // Forks `processes` children that spin until stop() (or until this process dies); false when
  // a fork failed (the ones started are stopped).
  bool start(int processes);
  void stop();
  int running() const { return static_cast<int>(pids_.size()); }

 private:
  std::vector<pid_t> pids_;
};

}  // namespace nnf::perf
