#include "reliability_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "support/shm_cleanup.h"

namespace nnf::test {
namespace {

using Clock = std::chrono::steady_clock;

// Forks; the child runs `body` and leaves with _exit (never returning into gtest, never
// running the parent's atexit handlers), status 1 when it recorded a failure.
pid_t forkRun(const std::function<void()>& body) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  // ctest's timeout kills only the parent: never outlive it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int before = failedParts();
  try {
    body();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "uncaught exception: " << error.what();
  } catch (...) {
    ADD_FAILURE() << "uncaught exception";
  }
  int code = failedParts() > before ? 1 : 0;
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

struct Child {
  std::string role;
  pid_t pid = -1;
  Ending ending = Ending::kSuccess;
  bool running = true;
  int status = 0;
  bool reported = false;
};

void waitAll(std::vector<Child>& children, double timeoutSec) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeoutSec));
  for (;;) {
    bool anyRunning = false;
    for (Child& child : children) {
      if (!child.running) continue;
      if (waitpid(child.pid, &child.status, WNOHANG) == child.pid) {
        child.running = false;
        removeSharedMemoryOf(child.pid);
      } else {
        anyRunning = true;
      }
    }
    if (!anyRunning) break;
    if (Clock::now() >= deadline) {
      for (Child& child : children) {
        if (!child.running) continue;
        kill(child.pid, SIGKILL);
        waitpid(child.pid, &child.status, 0);
        removeSharedMemoryOf(child.pid);
        child.running = false;
        child.reported = true;
        ADD_FAILURE() << "the " << child.role << " process (pid " << child.pid
                      << ") did not finish within " << timeoutSec << " s and was killed (hang?)";
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (const Child& child : children) {
    if (child.reported) continue;
    bool killed = WIFSIGNALED(child.status) && WTERMSIG(child.status) == SIGKILL;
    bool clean = WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0;
    if (child.ending == Ending::kKilled && !killed) {
      ADD_FAILURE() << "the " << child.role << " process was to kill itself mid-transfer but "
                    << describeStatus(child.status) << " (its failures are printed above)";
    } else if (child.ending == Ending::kSuccess && !clean) {
      ADD_FAILURE() << "the " << child.role << " process (pid " << child.pid << ") "
                    << describeStatus(child.status) << " (its failures are printed above)";
    }
  }
}

}  // namespace

void useShippedDefaults(ScopedEnv& env, std::initializer_list<config::Param> params) {
  for (config::Param param : params) {
    const config::ParamSpec& spec = config::spec(param);
    env.unset(spec.envName);
    fprintf(stderr, "[parent] shipped default %s=%s\n", spec.envName, spec.defaultValue);
  }
}

int openFdCount() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory stream's own descriptor
}

size_t residentBytes() {
  FILE* file = fopen("/proc/self/statm", "r");
  if (file == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  int got = fscanf(file, "%lu %lu", &size, &resident);
  fclose(file);
  if (got != 2) return 0;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void killSelf() {
  fflush(stdout);
  fflush(stderr);
  kill(getpid(), SIGKILL);
  for (;;) pause();
}

int shell(const std::string& command) {
  // stdout of the command is redirected to stderr: gtest's own output stays readable.
  std::string line = "(" + command + ") 1>&2";
  int status = system(line.c_str());
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string shellOutput(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  pclose(pipe);
  return out;
}

void runBare(const std::function<void()>& body, double timeoutSec) {
  std::vector<Child> children(1);
  children[0].role = "bare";
  children[0].pid = forkRun(body);
  ASSERT_GT(children[0].pid, 0) << "fork failed: " << strerror(errno);
  waitAll(children, timeoutSec);
}

void runPair(const Body& sender, const Body& receiver, const PairOptions& options) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << strerror(errno);
  auto childBody = [&](const std::string& role, int keep, int drop, const Body& body) {
    return [&, role, keep, drop] {
      close(drop);
      if (options.beforeLoad && !options.beforeLoad(role)) {
        ADD_FAILURE() << role << ": set-up before loading the plugin failed";
        return;
      }
      SCOPED_TRACE("in the " + role + " process " + std::to_string(getpid()));
      Channel channel(keep);
      Peer peer;
      peer.role = role;
      peer.channel = &channel;
      openPlugin(&peer);
      if (!::testing::Test::HasFatalFailure()) body(peer);
    };
  };
  std::vector<Child> children(2);
  children[0].role = "receiver";
  children[0].ending = options.receiverEnding;
  children[0].pid = forkRun(childBody("receiver", fds[1], fds[0], receiver));
  children[1].role = "sender";
  children[1].ending = options.senderEnding;
  children[1].pid = forkRun(childBody("sender", fds[0], fds[1], sender));
  // Both ends closed here, so a child that dies is seen as EOF by its partner.
  close(fds[0]);
  close(fds[1]);
  for (Child& child : children) {
    if (child.pid <= 0) {
      ADD_FAILURE() << "fork failed: " << strerror(errno);
      child.running = false;
      child.reported = true;
    }
  }
  if (options.whileRunning && children[0].pid > 0 && children[1].pid > 0)
    options.whileRunning(children[1].pid, children[0].pid);
  waitAll(children, options.timeoutSec);
}

std::string NamespacePair::unavailableReason() {
  if (geteuid() != 0) return "needs root to create network namespaces";
  if (shell("command -v ip >/dev/null && ip netns list >/dev/null") != 0)
    return "`ip netns` is not available (apt-get install iproute2)";
  return "";
}

NamespacePair::NamespacePair() {
  std::string tag = std::to_string(getpid());
  for (int side = 0; side < 2; ++side) {
    ns_[side] = "nnf" + tag + (side == 0 ? "a" : "b");
    iface_[side] = "nv" + tag + (side == 0 ? "a" : "b");
    address_[side] = side == 0 ? "10.77.0.1" : "10.77.0.2";
  }
  std::string script = "set -e; ip netns add " + ns_[0] + "; ip netns add " + ns_[1] +
                       "; ip link add " + iface_[0] + " netns " + ns_[0] + " type veth peer name " +
                       iface_[1] + " netns " + ns_[1];
  for (int side = 0; side < 2; ++side) {
    script += "; ip -n " + ns_[side] + " addr add " + address_[side] + "/24 dev " + iface_[side] +
              "; ip -n " + ns_[side] + " link set " + iface_[side] + " up; ip -n " + ns_[side] +
              " link set lo up";
  }
  if (shell(script) != 0) {
    error_ = "creating network namespaces failed (see the ip output above)";
    return;
  }
  // The veth link takes a moment to come up on both ends.
  // (No ping here: the images we run on may lack it; the carrier state is what matters.)
  std::string waitUp = "for i in $(seq 50); do ";
  for (int side = 0; side < 2; ++side) {
    waitUp += "ip -n " + ns_[side] + " link show " + iface_[side] + " | grep -q 'state UP' && ";
  }
  waitUp += "exit 0; sleep 0.1; done; exit 1";
  if (shell(waitUp) != 0) {
    error_ = "the veth pair between the namespaces does not pass traffic";
    return;
  }
  ok_ = true;
}

NamespacePair::~NamespacePair() {
  // Deleting a namespace deletes the veth end inside it, and with it the peer end.
  for (int side = 0; side < 2; ++side) {
    if (!ns_[side].empty()) shell("ip netns del " + ns_[side] + " 2>/dev/null || true");
  }
}

bool NamespacePair::enter(int side) const {
  std::string path = "/var/run/netns/" + ns_[side];
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "open %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  int ret = setns(fd, CLONE_NEWNET);
  int saved = errno;
  close(fd);
  if (ret != 0) fprintf(stderr, "setns %s: %s\n", path.c_str(), strerror(saved));
  return ret == 0;
}

int NamespacePair::exec(int side, const std::string& command) const {
  return shell("ip netns exec " + ns_[side] + " sh -c '" + command + "'");
}

}  // namespace nnf::test
