#include "load.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace nnf::perf {

bool BusyLoad::start(int processes) {
  std::fflush(nullptr);  // a child must not write the parent's buffered output again
  for (int i = 0; i < processes; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fabric-net-perf: fork (--load)");
      stop();
      return false;
    }
    if (pid == 0) {
      // Dies with the tool, whatever way the tool ends.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() == 1) _exit(0);
      // Pure computation, no system calls: what a training job's busy thread does to a core.
      volatile unsigned long spins = 0;
      for (;;) spins = spins + 1;
    }
    pids_.push_back(pid);
  }
  return true;
}

void BusyLoad::stop() {
  for (pid_t pid : pids_) kill(pid, SIGKILL);
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  pids_.clear();
}

}  // namespace nnf::perf
