// Helpers the reliability tests need beyond tests/support: pairs whose children are allowed to
// die (a dead peer is the point of some tests; the forking is support/processes.h's), process
// resource probes and throw-away network namespaces. Scoped environment variables come from
// support/scoped_env.h.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>

#include "config/config.h"
#include "support/harness.h"
#include "support/scoped_env.h"

namespace nnf::test {

// Unsets `params` for the lifetime of `env`, so that the children run with the plugin's shipped
// defaults (an override from outside is removed, not replaced by a copy of today's default), and
// logs the default each one takes.
void useShippedDefaults(ScopedEnv& env, std::initializer_list<config::Param> params);

// Open file descriptors of this process (/proc/self/fd).
int openFdCount();
// Resident set size of this process in bytes (/proc/self/statm).
size_t residentBytes();

struct PairOptions {
  double timeoutSec = 120;
  Ending senderEnding = Ending::kSuccess;
  Ending receiverEnding = Ending::kSuccess;
  // Called in each child before the plugin is loaded (e.g. to enter a network namespace);
  // arguments: role ("sender"/"receiver"). Returns false to fail the child.
  std::function<bool(const std::string&)> beforeLoad;
  // Called in the parent while the children run, once, after both have started: e.g. to break
  // the link between them. Gets the channel-independent pids.
  std::function<void(pid_t sender, pid_t receiver)> whileRunning;
};

// Like runTwoProcesses, but a child may be expected to die by SIGKILL (it kills itself at the
// point the test chooses, with killSelf()), and a hook may run in the parent meanwhile.
void runPair(const Body& sender, const Body& receiver, const PairOptions& options);

// SIGKILL to the calling process, after flushing what it has written: the peer of a test must
// see a process that vanished without closing anything, as after a crash or an OOM kill.
[[noreturn]] void killSelf();

// Runs a shell command; returns its exit status (-1 when it could not be run). Output goes to
// stderr so that a failing set-up is visible in the test log.
int shell(const std::string& command);
// Runs a shell command and returns what it wrote to stdout ("" when it could not be run); its
// stderr goes to the test log.
std::string shellOutput(const std::string& command);

// A pair of network namespaces joined by a veth pair, created by the constructor and always
// deleted by the destructor (and by the parent if the test crashes midway: names carry the pid,
// so a later run can also clean up with `ip netns list | grep nnf`).
class NamespacePair {
 public:
  // Skip reason when the machine cannot do this ("" when it can): needs root and `ip netns`.
  static std::string unavailableReason();

  NamespacePair();
  ~NamespacePair();
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  // Namespace and interface names, and the address of each side.
  const std::string& ns(int side) const { return ns_[side]; }
  const std::string& iface(int side) const { return iface_[side]; }
  const std::string& address(int side) const { return address_[side]; }
  // Enters side's namespace in the calling process (a forked child, before loading the plugin).
  bool enter(int side) const;
  // Runs a command inside side's namespace.
  int exec(int side, const std::string& command) const;

 private:
  bool ok_ = false;
  std::string error_;
  std::string ns_[2];
  std::string iface_[2];
  std::string address_[2];
};

}  // namespace nnf::test
