// The one way tests fork processes. A child runs its body and leaves with _exit (never returning
// into gtest's remaining tests, never running the parent's atexit handlers), after the hooks
// registered with addChildExitHook; it dies with the parent (ctest's timeout kills the parent
// only). The parent waits for every child at most a timeout, gives the others a grace period
// once one ends other than expected (its partners usually see their channel close and fail on
// their own), kills what is left, and removes the shared-memory regions each child left.
//
// harness.h builds the plugin-loading runs (runTwoProcesses, runOneProcess) on this; tests of
// the stand-ins (tests/efa_rules, tests/soft_efa), which load no plugin, use it directly.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace nnf::test {

// How a child is expected to end: exit status 0, or SIGKILL (a child that kills itself on purpose,
// as after a crash or an OOM kill).
enum class Ending { kSuccess, kKilled };

struct ProcessSpec {
  std::string role;           // for messages: "sender", "receiver", "rank 2", ...
  std::function<int()> body;  // runs in the child; its return value is the exit status
  Ending ending = Ending::kSuccess;
};

struct ProcessEnd {
  std::string role;
  pid_t pid = -1;         // -1: the fork failed
  int status = 0;         // waitpid's status
  bool timedOut = false;  // killed by the parent at the deadline (or after a partner failed)
  bool asExpected = false;
};

struct ProcessOptions {
  double timeoutSec = 60;
  // Once a child ends other than expected, the others get at most this long.
  double graceSec = 15;
  // ADD_FAILURE for every child that did not end as expected (false: the caller judges).
  bool report = true;
  // An exit status that is no failure but a reason to skip (runOneProcess's isolation check);
  // such a child counts as ending as expected, and the caller looks at its status.
  int skipStatus = -1;
  // Runs in the parent once, after every child started (pids in the order of the specs).
  std::function<void(const std::vector<pid_t>&)> whileRunning;
};

// Forks one child per spec, in order, and waits as described above.
std::vector<ProcessEnd> runProcesses(const std::vector<ProcessSpec>& specs,
                                     const ProcessOptions& options = {});

// One child, nothing reported: its exit status, 128 + the signal that killed it, or -1 when it
// was killed at the timeout (-2 when the fork failed).
int runChild(const std::function<int()>& body, double timeoutSec);

// A child body for gtest assertions: runs `body`, turns an uncaught exception into a failure,
// and returns 1 when the child recorded failures of its own (0 otherwise).
std::function<int()> judgedBody(std::function<void()> body);

// Runs `body` in one child; its gtest failures, a crash or a hang fail the calling test.
void runBare(const std::function<void()>& body, double timeoutSec = 60);

// Called in every child right before it exits by returning from its body (not when it is killed
// or calls _exit itself), in the order added; e.g. a provider stand-in writing its statistics.
void addChildExitHook(void (*hook)());

// "exited with status N", "was killed by signal N (name)": a child's end for messages.
std::string describeStatus(int status);

// Failures recorded so far in the current test, so that a forked child judges only its own.
int failedParts();

// Whether process `pid` is stopped (SIGSTOP: a test's stand-in for a hung or descheduled peer)
// within `timeoutSec`.
bool waitUntilStopped(pid_t pid, double timeoutSec = 10);

}  // namespace nnf::test
