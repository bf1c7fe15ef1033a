// Two-process harness for functional tests: the test body forks a sender and a receiver, each of
// which dlopens the built plugin and drives it like NCCL, talking to the other over a socket
// pair (listen handles, "go" signals). The parent only waits: a child's gtest failure, crash or
// hang becomes a failure of the test in the parent, never a hang of the suite. The forking
// itself is support/processes.h's, the one way tests fork.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "nccl_net/net.h"
#include "plugin_loader.h"
#include "support/processes.h"

namespace nnf::test {

// A byte stream to the other process. Every call is bounded by a timeout and reports a gtest
// failure (and returns false) on error, timeout or the peer's exit.
class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  bool send(const void* data, size_t size);
  bool recv(void* data, size_t size, double timeoutSec = 60);
  template <typename T>
  bool sendValue(const T& value) {
    return send(&value, sizeof(value));
  }
  template <typename T>
  bool recvValue(T* value, double timeoutSec = 60) {
    return recv(value, sizeof(*value), timeoutSec);
  }
  // A one-byte rendezvous ("I have posted, go ahead").
  bool signal() { return sendValue<char>('!'); }
  bool wait(double timeoutSec = 60);
  // Whether the other side's signal is here now (consumed if so); never a failure.
  bool signalled();
  // Both sides meet here before exiting, so that neither sees the other die while its last
  // completions are still in flight. Silent: a partner that already failed is reported anyway.
  void finishBarrier(double timeoutSec);

 private:
  int fd_;
};

// Everything a child process holds: the loaded plugin after init/devices/getProperties, the
// channel to the other process and the WARN lines the plugin logged.
struct Peer {
  std::string role;
  Channel* channel = nullptr;  // nullptr in single-process runs
  std::unique_ptr<tools::PluginLibrary> library;
  const abi::NetV8* net = nullptr;
  int ndev = 0;
  int dev = 0;
  abi::PropertiesV8 props{};

  // WARN lines logged by the plugin since the last reset (process-wide: the logger is global).
  int warnings() const;
  std::vector<std::string> warningTexts() const;
  // INFO lines logged since the last reset (the first 2000: decisions are logged at init).
  std::vector<std::string> infoTexts() const;
  void resetWarnings();
};

// The logger handed to init: counts WARN lines and echoes them (and INFO when NNF_TEST_VERBOSE
// is set) to stderr with the process id, so that a failing child leaves a readable trail.
void testLogger(abi::LogLevel level, unsigned long flags, const char* file, int line,
                const char* fmt, ...) __attribute__((format(printf, 5, 6)));

// The plugin under test: NNF_PLUGIN if set, else the one built beside the tests.
std::string pluginPath();

using Body = std::function<void(Peer& peer)>;

// Forks a sender and a receiver, runs each body after loading and initialising the plugin, and
// waits at most timeoutSec for both. Failures in either child fail the calling test. Children
// take FI_PROVIDER from NNF_TEST_PROVIDER when set, and FI_TCP_IFACE defaults to lo; a child also
// sets the variables NNF_TEST_ENV_SENDER or NNF_TEST_ENV_RECEIVER lists ("NAME=VALUE;...").
void runTwoProcesses(const Body& sender, const Body& receiver, double timeoutSec = 60);

// Where a child's traffic may go. kIsolated puts the child in a network namespace of its own
// with only loopback up, for tests that hand the plugin garbage addresses: whatever the plugin
// makes of them, no packet can leave the machine. The test is skipped where namespaces are
// unavailable.
enum class Network { kHost, kIsolated };

// The same with a single child (for tests that need one process but must survive a crash).
void runOneProcess(const Body& body, double timeoutSec = 60, Network network = Network::kHost);

// For the harness's own tests: runs `body` in a child without reporting anything and returns its
// exit code, 128 + the signal that killed it, or -1 when it was killed at the timeout.
int runOneProcessRaw(const Body& body, double timeoutSec);

// A rank of a collective test (the RMA plugin's connect and regMrSym involve every rank): the
// child's plugin as for two processes, and a channel to every other rank.
struct RankPeer : Peer {
  int rank = 0;
  int nranks = 0;
  std::vector<std::unique_ptr<Channel>> links;  // links[r]: to rank r (null for this rank)
  // Every rank's `size` bytes, in rank order, into `all` (nranks * size bytes); false (a gtest
  // failure) when a rank is gone or silent.
  bool allGather(const void* mine, size_t size, void* all, double timeoutSec = 120);
  bool barrier(double timeoutSec = 120);
};
using RankBody = std::function<void(RankPeer& peer)>;

// Forks `nranks` processes ("rank 0", ...), each connected to every other by a socket pair, and
// runs `body` in each after loading and initialising the plugin; waits at most timeoutSec. Ranks
// in `mayBeKilled` may end by SIGKILL (a test killing one mid-run); any other end but success
// fails the test.
void runRanks(int nranks, const RankBody& body, double timeoutSec = 120,
              const std::set<int>& mayBeKilled = {});

// The ABI version the suite drives: NNF_TEST_ABI (v6 to v12, 0 for the newest exported), v8
// when unset. Throws std::runtime_error for anything else.
int testAbiVersion();

// Loads the plugin and checks init/devices/getProperties; fatal failure when anything is off.
void openPlugin(Peer* peer);

}  // namespace nnf::test
