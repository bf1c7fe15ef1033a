#include "support/processes.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "support/shm_cleanup.h"

namespace nnf::test {
namespace {

using Clock = std::chrono::steady_clock;

std::mutex g_hooksMutex;
std::vector<void (*)()>& exitHooks() {
  static auto* hooks = new std::vector<void (*)()>();
  return *hooks;
}

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

pid_t forkChild(const std::function<int()>& body) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  // ctest's timeout kills only the parent: never outlive it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int code = 1;
  try {
    code = body();
  } catch (const std::exception& error) {
    fprintf(stderr, "[child %d] uncaught exception: %s\n", static_cast<int>(getpid()),
            error.what());
  } catch (...) {
    fprintf(stderr, "[child %d] uncaught exception\n", static_cast<int>(getpid()));
  }
  std::vector<void (*)()> hooks;
  {
    std::lock_guard<std::mutex> lock(g_hooksMutex);
    hooks = exitHooks();
  }
  for (void (*hook)() : hooks) hook();
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

bool endedAsExpected(const ProcessSpec& spec, const ProcessEnd& end, int skipStatus) {
  if (end.timedOut || end.pid < 0) return false;
  if (spec.ending == Ending::kKilled)
    return WIFSIGNALED(end.status) && WTERMSIG(end.status) == SIGKILL;
  if (!WIFEXITED(end.status)) return false;
  int code = WEXITSTATUS(end.status);
  return code == 0 || (skipStatus >= 0 && code == skipStatus);
}

void reap(ProcessEnd& end, int status) {
  end.status = status;
  removeSharedMemoryOf(end.pid);
}

}  // namespace

std::vector<ProcessEnd> runProcesses(const std::vector<ProcessSpec>& specs,
                                     const ProcessOptions& options) {
  std::vector<ProcessEnd> ends(specs.size());
  std::vector<bool> running(specs.size(), false);
  std::vector<pid_t> pids;
  for (size_t i = 0; i < specs.size(); ++i) {
    ends[i].role = specs[i].role;
    ends[i].pid = forkChild(specs[i].body);
    running[i] = ends[i].pid > 0;
    if (ends[i].pid <= 0) {
      ends[i].pid = -1;
      if (options.report)
        ADD_FAILURE() << "fork of the " << specs[i].role << " process failed: " << strerror(errno);
    }
    pids.push_back(ends[i].pid);
  }
  if (options.whileRunning) options.whileRunning(pids);

  Clock::time_point deadline = after(options.timeoutSec);
  bool anyFailed = false;
  for (;;) {
    bool anyRunning = false;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!running[i]) continue;
      int status = 0;
      if (waitpid(ends[i].pid, &status, WNOHANG) != ends[i].pid) {
        anyRunning = true;
        continue;
      }
      running[i] = false;
      reap(ends[i], status);
      if (!endedAsExpected(specs[i], ends[i], options.skipStatus) && !anyFailed) {
        anyFailed = true;
        Clock::time_point grace = after(options.graceSec);
        if (grace < deadline) deadline = grace;
      }
    }
    if (!anyRunning) break;
    if (Clock::now() >= deadline) {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (!running[i]) continue;
        kill(ends[i].pid, SIGKILL);
        int status = 0;
        waitpid(ends[i].pid, &status, 0);
        running[i] = false;
        reap(ends[i], status);
        ends[i].timedOut = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  for (size_t i = 0; i < specs.size(); ++i) {
    ProcessEnd& end = ends[i];
    end.asExpected = endedAsExpected(specs[i], end, options.skipStatus);
    if (!options.report || end.asExpected || end.pid < 0) continue;
    if (end.timedOut) {
      ADD_FAILURE() << "the " << end.role << " process (pid " << end.pid
                    << ") did not finish in time and was killed"
                    << (anyFailed ? " after a partner failed" : " (hang?)");
    } else if (specs[i].ending == Ending::kKilled) {
      ADD_FAILURE() << "the " << end.role << " process was to kill itself but "
                    << describeStatus(end.status) << " (its failures are printed above)";
    } else {
      ADD_FAILURE() << "the " << end.role << " process (pid " << end.pid << ") "
                    << describeStatus(end.status) << " (its failures are printed above)";
    }
  }
  return ends;
}

int runChild(const std::function<int()>& body, double timeoutSec) {
  ProcessOptions options;
  options.timeoutSec = timeoutSec;
  options.report = false;
  ProcessEnd end = runProcesses({{"single", body, Ending::kSuccess}}, options).front();
  if (end.pid < 0) return -2;
  if (end.timedOut) return -1;
  if (WIFSIGNALED(end.status)) return 128 + WTERMSIG(end.status);
  return WIFEXITED(end.status) ? WEXITSTATUS(end.status) : -3;
}

std::function<int()> judgedBody(std::function<void()> body) {
  return [body = std::move(body)] {
    int before = failedParts();
    try {
      body();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "uncaught exception: " << error.what();
    } catch (...) {
      ADD_FAILURE() << "uncaught exception";
    }
    return failedParts() > before ? 1 : 0;
  };
}

void runBare(const std::function<void()>& body, double timeoutSec) {
  ProcessOptions options;
  options.timeoutSec = timeoutSec;
  runProcesses({{"bare", judgedBody(body), Ending::kSuccess}}, options);
}

void addChildExitHook(void (*hook)()) {
  std::lock_guard<std::mutex> lock(g_hooksMutex);
  for (void (*known)() : exitHooks()) {
    if (known == hook) return;
  }
  exitHooks().push_back(hook);
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

int failedParts() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return 0;
  const ::testing::TestResult* result = info->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i)
    failed += result->GetTestPartResult(i).failed();
  return failed;
}

bool waitUntilStopped(pid_t pid, double timeoutSec) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSec);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat(path);
    std::string line;
    std::getline(stat, line);
    size_t end = line.rfind(')');  // the command name may hold spaces
    if (end != std::string::npos && end + 2 < line.size() && line[end + 2] == 'T') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace nnf::test
