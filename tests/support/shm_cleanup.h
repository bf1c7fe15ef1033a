// Shared-memory regions a finished child left behind. libfabric's shm names an endpoint's region
// "<pid>:<n>:<n>" by default and unlinks it when the endpoint closes; a child that is killed, or
// ends with _exit before closing, leaves it in /dev/shm. With pids recycled (pid_max 32768 here),
// a later process meeting its stale region cannot enable an shm endpoint (fi_enable fails), so
// the harnesses remove a child's regions as soon as they have reaped it.
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace nnf::test {

inline void removeSharedMemoryOf(pid_t pid) {
  const std::string prefix = std::to_string(pid) + ":";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    if (strncmp(entry->d_name, prefix.c_str(), prefix.size()) == 0) {
      unlink((std::string("/dev/shm/") + entry->d_name).c_str());
    }
  }
  closedir(dir);
}

}  // namespace nnf::test
