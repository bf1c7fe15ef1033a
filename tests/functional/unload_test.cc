// NCCL unloads its net plugin after the last comm (dlclose), and a later communicator loads it
// again. Three times in one process: load, init, move verified data, close (which starts the
// device's progress keeper thread), finalize where the ABI has it, unload. After each unload the
// library is gone from the process, no thread of it is left, and the next load works.
#include <dirent.h>
#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "abi_adapter.h"
#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"

namespace nnf::test {
namespace {

// Threads of this process named as the plugin names its own ("nnf-keeper").
int pluginThreads() {
  int count = 0;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return -1;
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    count += name.rfind("nnf-", 0) == 0;
  }
  closedir(tasks);
  return count;
}

// The plugin's threads once they were stopped: a joined thread leaves /proc/self/task a moment
// after pthread_join returns (the kernel wakes the joiner before it releases the task; seen once
// in CI), so a count above zero is read again for up to a second. A thread that was not stopped
// stays counted.
int pluginThreadsAfterStop() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int count = pluginThreads();
  while (count != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    count = pluginThreads();
  }
  return count;
}

bool loaded(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

TEST(Unload, LoadInitTransferCloseUnloadThreeTimesInOneProcess) {
  runOneProcess(
      [](Peer& harness) {
        const std::string path = pluginPath();
        // The harness's own load is the first cycle's: it has initialised the plugin.
        harness.library->unload();
        harness.net = nullptr;
        for (int cycle = 0; cycle < 3; ++cycle) {
          SCOPED_TRACE("cycle " + std::to_string(cycle));
          ASSERT_FALSE(loaded(path)) << "the plugin stayed loaded after its last dlclose";
          Peer peer;
          peer.role = harness.role;
          ASSERT_NO_FATAL_FAILURE(openPlugin(&peer));
          // One rail's worth: a write to our own endpoint on a rail that never carried a message
          // to itself fails on efa (no handshake with itself there); NCCL never connects a
          // process to itself through the net plugin.
          constexpr int kSize = 64 << 10;
          HostBuffer out(kSize), in(kSize);
          fillPattern(out.data(), kSize, 40 + cycle);
          ASSERT_NO_FATAL_FAILURE(
              transferOnFreshPair(peer, out.data(), in.data(), kSize, 40 + cycle));
          EXPECT_GE(pluginThreads(), 1) << "a close starts the device's progress keeper";
          if (peer.library->version() >= 11) {
            EXPECT_EQ(tools::finalizeAdapted(peer.library->version()), abi::kSuccess);
          }
          peer.library->unload();  // NCCL's dlclose
          EXPECT_EQ(pluginThreadsAfterStop(), 0) << "a thread of the plugin outlived its library";
          // A thread left running in unmapped code would crash the process by now.
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        EXPECT_FALSE(loaded(path));
      },
      120);
}

}  // namespace
}  // namespace nnf::test
