#include "reliability_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nnf::test {

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

void runPair(const Body& sender, const Body& receiver, const PairOptions& options) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << strerror(errno);
  auto child = [&](const std::string& role, int keep, int drop, const Body& body,
                   Ending ending) -> ProcessSpec {
    return {role, judgedBody([&, role, keep, drop] {
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
            }),
            ending};
  };
  ProcessOptions run;
  run.timeoutSec = options.timeoutSec;
  run.whileRunning = [&](const std::vector<pid_t>& pids) {
    // Both ends closed here, so a child that dies is seen as EOF by its partner.
    close(fds[0]);
    close(fds[1]);
    if (options.whileRunning && pids[0] > 0 && pids[1] > 0) options.whileRunning(pids[1], pids[0]);
  };
  runProcesses({child("receiver", fds[1], fds[0], receiver, options.receiverEnding),
                child("sender", fds[0], fds[1], sender, options.senderEnding)},
               run);
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
