#include "support/harness.h"
#include "support/test_env.h"

#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <memory>
#include <mutex>

namespace nnf::test {
namespace {

// The logger is a plain function pointer, so its state is process-wide.
std::atomic<int> g_warnings{0};
std::mutex g_textsMutex;
std::vector<std::string> g_texts;
std::vector<std::string> g_infos;
std::string g_role = "parent";

using Clock = std::chrono::steady_clock;

double secondsLeft(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

constexpr int kExitNoIsolation = 77;

// A new network namespace with loopback up; false where the kernel or privileges refuse.
bool isolateNetwork() {
  if (unshare(CLONE_NEWNET) != 0) {
    // Unprivileged: a user namespace grants the capability over a new network namespace.
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return false;
  }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ifreq request{};
  strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  bool up = ioctl(fd, SIOCGIFFLAGS, &request) == 0;
  request.ifr_flags |= IFF_UP;
  up = up && ioctl(fd, SIOCSIFFLAGS, &request) == 0;
  close(fd);
  return up;
}

// ctest passes the provider as NNF_TEST_PROVIDER (one variable: gtest_discover_tests cannot
// carry a list of them). The tcp provider is always kept on loopback.
void applyProviderEnvironment() {
  const char* provider = std::getenv("NNF_TEST_PROVIDER");
  if (provider != nullptr && *provider != '\0') useTestProvider(provider);
  setenv("FI_TCP_IFACE", "lo", 0);
}

// NNF_TEST_ENV_<ROLE> (role in capitals), "NAME=VALUE;NAME=VALUE": variables of that child only,
// for tests whose two sides must be configured differently.
void applyRoleEnvironment(const std::string& role) {
  std::string name = "NNF_TEST_ENV_";
  for (char c : role) name += static_cast<char>(toupper(static_cast<unsigned char>(c)));
  const char* list = std::getenv(name.c_str());
  if (list == nullptr) return;
  std::string text = list;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    size_t equals = item.find('=');
    if (equals != std::string::npos) {
      setenv(item.substr(0, equals).c_str(), item.substr(equals + 1).c_str(), 1);
    }
    start = end + 1;
  }
}

int childMain(const std::string& role, Channel* channel, const Body& body, Network network) {
  int failedBefore = failedParts();
  g_role = role;
  if (network == Network::kIsolated && !isolateNetwork()) return kExitNoIsolation;
  applyProviderEnvironment();
  applyRoleEnvironment(role);
  try {
    SCOPED_TRACE("in the " + role + " process " + std::to_string(getpid()));
    Peer peer;
    peer.role = role;
    peer.channel = channel;
    openPlugin(&peer);
    if (!::testing::Test::HasFatalFailure()) body(peer);
    // A failed child leaves at once: its partner sees EOF instead of waiting.
    if (channel != nullptr && failedParts() == failedBefore) channel->finishBarrier(30);
  } catch (const std::exception& error) {
    ADD_FAILURE() << role << ": uncaught exception: " << error.what();
  } catch (...) {
    ADD_FAILURE() << role << ": uncaught exception";
  }
  return failedParts() > failedBefore ? 1 : 0;
}

// A child that loads the plugin and runs `body`, talking to its partner over `keepFd` (closing
// the partner's end `closeFd` first, so that either one's exit reads as EOF to the other).
ProcessSpec pluginChild(const std::string& role, int keepFd, int closeFd, const Body& body,
                        Network network = Network::kHost) {
  return {role, [role, keepFd, closeFd, &body, network] {
            if (closeFd >= 0) close(closeFd);
            std::unique_ptr<Channel> channel;
            if (keepFd >= 0) channel = std::make_unique<Channel>(keepFd);
            return childMain(role, channel.get(), body, network);
          }};
}

}  // namespace

Channel::~Channel() {
  close(fd_);
}

bool Channel::send(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    // MSG_NOSIGNAL: a dead peer must be a failure, not SIGPIPE.
    ssize_t sent = ::send(fd_, bytes, size, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) {
      ADD_FAILURE() << "channel send failed: " << strerror(errno);
      return false;
    }
    bytes += sent;
    size -= static_cast<size_t>(sent);
  }
  return true;
}

bool Channel::signalled() {
  pollfd entry{fd_, POLLIN, 0};
  if (poll(&entry, 1, 0) != 1) return false;
  char value = 0;
  return recv(&value, 1, 1);
}

bool Channel::recv(void* data, size_t size, double timeoutSec) {
  char* bytes = static_cast<char*>(data);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeoutSec));
  while (size > 0) {
    int left = static_cast<int>(secondsLeft(deadline) * 1000);
    if (left <= 0) {
      ADD_FAILURE() << "channel: no message from the other process within " << timeoutSec << " s";
      return false;
    }
    pollfd entry{fd_, POLLIN, 0};
    int ready = poll(&entry, 1, left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    ssize_t got = ::recv(fd_, bytes, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) {
      ADD_FAILURE() << "channel: the other process exited (closed its end)";
      return false;
    }
    if (got < 0) {
      ADD_FAILURE() << "channel recv failed: " << strerror(errno);
      return false;
    }
    bytes += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

bool Channel::wait(double timeoutSec) {
  char token = 0;
  if (!recvValue(&token, timeoutSec)) return false;
  if (token != '!') {
    ADD_FAILURE() << "channel: expected a signal byte, got " << static_cast<int>(token);
    return false;
  }
  return true;
}

void Channel::finishBarrier(double timeoutSec) {
  char token = 'F';
  if (::send(fd_, &token, 1, MSG_NOSIGNAL) != 1) return;
  pollfd entry{fd_, POLLIN, 0};
  // Whatever arrives (the partner's token or EOF) ends the wait.
  if (::poll(&entry, 1, static_cast<int>(timeoutSec * 1000)) > 0) (void)::recv(fd_, &token, 1, 0);
}

int Peer::warnings() const {
  return g_warnings.load();
}

std::vector<std::string> Peer::warningTexts() const {
  std::lock_guard<std::mutex> lock(g_textsMutex);
  return g_texts;
}

std::vector<std::string> Peer::infoTexts() const {
  std::lock_guard<std::mutex> lock(g_textsMutex);
  return g_infos;
}

void Peer::resetWarnings() {
  std::lock_guard<std::mutex> lock(g_textsMutex);
  g_texts.clear();
  g_infos.clear();
  g_warnings.store(0);
}

void testLogger(abi::LogLevel level, unsigned long flags, const char* file, int line,
                const char* fmt, ...) {
  char text[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  if (level == abi::kLogWarn) {
    {
      std::lock_guard<std::mutex> lock(g_textsMutex);
      g_texts.emplace_back(text);
    }
    g_warnings.fetch_add(1);
  } else if (level == abi::kLogInfo) {
    std::lock_guard<std::mutex> lock(g_textsMutex);
    if (g_infos.size() < 2000) g_infos.emplace_back(text);
  }
  static const bool verbose = std::getenv("NNF_TEST_VERBOSE") != nullptr;
  if (level == abi::kLogWarn || verbose)
    fprintf(stderr, "[%s %d] %s %s:%d %s\n", g_role.c_str(), static_cast<int>(getpid()),
            level == abi::kLogWarn ? "WARN" : "INFO", file != nullptr ? file : "?", line, text);
}

std::string pluginPath() {
  return tools::defaultPluginPath(NNF_PLUGIN_PATH);
}

int testAbiVersion() {
  // The suite is written against v8; NNF_TEST_ABI=v12 (or v6, ...) drives it through another
  // exported version, adapted to v8's shape as NCCL adapts older plugins to its newest.
  if (std::getenv("NNF_TEST_ABI") == nullptr) return 8;
  return tools::abiVersionFromEnv("NNF_TEST_ABI");
}

void openPlugin(Peer* peer) {
  try {
    peer->library = std::make_unique<tools::PluginLibrary>(pluginPath(), testAbiVersion());
  } catch (const std::exception& error) {
    FAIL() << error.what();
  }
  peer->net = &peer->library->net();
  const abi::NetV8& net = *peer->net;
  ASSERT_NE(net.init, nullptr);
  ASSERT_EQ(net.init(testLogger), abi::kSuccess) << "init failed";
  ASSERT_EQ(net.devices(&peer->ndev), abi::kSuccess);
  ASSERT_GE(peer->ndev, 1) << "the plugin reports no device";
  if (const char* dev = std::getenv("NNF_TEST_DEVICE")) peer->dev = atoi(dev);
  ASSERT_LT(peer->dev, peer->ndev);
  ASSERT_EQ(net.getProperties(peer->dev, &peer->props), abi::kSuccess);
  ASSERT_GE(peer->props.maxRecvs, 1);
  ASSERT_GE(peer->props.maxComms, 1);
}

void runTwoProcesses(const Body& sender, const Body& receiver, double timeoutSec) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << strerror(errno);
  ProcessOptions options;
  options.timeoutSec = timeoutSec;
  // Both ends are closed here once the children have theirs, so that a child that dies is seen
  // as EOF by its partner.
  options.whileRunning = [&fds](const std::vector<pid_t>&) {
    close(fds[0]);
    close(fds[1]);
  };
  runProcesses({pluginChild("receiver", fds[1], fds[0], receiver),
                pluginChild("sender", fds[0], fds[1], sender)},
               options);
}

void runOneProcess(const Body& body, double timeoutSec, Network network) {
  ProcessOptions options;
  options.timeoutSec = timeoutSec;
  options.skipStatus = kExitNoIsolation;
  ProcessEnd end = runProcesses({pluginChild("single", -1, -1, body, network)}, options).front();
  if (!end.timedOut && WIFEXITED(end.status) && WEXITSTATUS(end.status) == kExitNoIsolation)
    GTEST_SKIP() << "no network namespace available to isolate this test";
}

bool RankPeer::allGather(const void* mine, size_t size, void* all, double timeoutSec) {
  auto* out = static_cast<uint8_t*>(all);
  memcpy(out + static_cast<size_t>(rank) * size, mine, size);
  // Small payloads (handles): every send fits the socket buffer, so send all, then receive.
  for (int r = 0; r < nranks; ++r) {
    if (r != rank && !links[static_cast<size_t>(r)]->send(mine, size)) return false;
  }
  for (int r = 0; r < nranks; ++r) {
    if (r == rank) continue;
    if (!links[static_cast<size_t>(r)]->recv(out + static_cast<size_t>(r) * size, size,
                                              timeoutSec)) {
      return false;
    }
  }
  return true;
}

bool RankPeer::barrier(double timeoutSec) {
  std::vector<char> all(static_cast<size_t>(nranks));
  char token = 'B';
  return allGather(&token, 1, all.data(), timeoutSec);
}

namespace {

// Rank `rank`'s child: only its own ends of the socket pairs stay open, so that a rank that
// dies is EOF to every other.
int rankMain(int rank, int nranks, const std::vector<std::vector<int>>& fds,
             const RankBody& body) {
  for (int i = 0; i < nranks; ++i) {
    for (int j = 0; j < nranks; ++j) {
      int fd = fds[static_cast<size_t>(i)][static_cast<size_t>(j)];
      if (fd >= 0 && i != rank) close(fd);
    }
  }
  std::string role = "rank " + std::to_string(rank);
  int failedBefore = failedParts();
  g_role = role;
  applyProviderEnvironment();
  try {
    SCOPED_TRACE("in the " + role + " process " + std::to_string(getpid()));
    RankPeer peer;
    peer.role = role;
    peer.rank = rank;
    peer.nranks = nranks;
    peer.links.resize(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r) {
      int fd = fds[static_cast<size_t>(rank)][static_cast<size_t>(r)];
      if (fd >= 0) peer.links[static_cast<size_t>(r)] = std::make_unique<Channel>(fd);
    }
    openPlugin(&peer);
    if (!::testing::Test::HasFatalFailure()) body(peer);
    // Leave together, so that no rank sees another die with completions in flight; a rank that
    // failed leaves at once (its partners see EOF).
    if (failedParts() == failedBefore) {
      for (auto& link : peer.links) {
        if (link) link->finishBarrier(30);
      }
    }
  } catch (const std::exception& error) {
    ADD_FAILURE() << role << ": uncaught exception: " << error.what();
  } catch (...) {
    ADD_FAILURE() << role << ": uncaught exception";
  }
  return failedParts() > failedBefore ? 1 : 0;
}

}  // namespace

void runRanks(int nranks, const RankBody& body, double timeoutSec,
              const std::set<int>& mayBeKilled) {
  ASSERT_GE(nranks, 1);
  // fds[i][j]: rank i's end of its pair with rank j.
  std::vector<std::vector<int>> fds(static_cast<size_t>(nranks),
                                    std::vector<int>(static_cast<size_t>(nranks), -1));
  for (int i = 0; i < nranks; ++i) {
    for (int j = i + 1; j < nranks; ++j) {
      int pair[2];
      ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0) << strerror(errno);
      fds[static_cast<size_t>(i)][static_cast<size_t>(j)] = pair[0];
      fds[static_cast<size_t>(j)][static_cast<size_t>(i)] = pair[1];
    }
  }
  std::vector<ProcessSpec> specs;
  for (int rank = 0; rank < nranks; ++rank) {
    ProcessSpec spec{"rank " + std::to_string(rank),
                     [rank, nranks, &fds, &body] { return rankMain(rank, nranks, fds, body); }};
    if (mayBeKilled.count(rank) != 0) spec.ending = Ending::kKilled;
    specs.push_back(std::move(spec));
  }
  ProcessOptions options;
  options.timeoutSec = timeoutSec;
  options.whileRunning = [&fds](const std::vector<pid_t>&) {
    for (auto& row : fds) {
      for (int& fd : row) {
        if (fd >= 0) close(fd);
        fd = -1;
      }
    }
  };
  runProcesses(specs, options);
}

int runOneProcessRaw(const Body& body, double timeoutSec) {
  ProcessSpec spec = pluginChild("single", -1, -1, body);
  return runChild(spec.body, timeoutSec);
}

}  // namespace nnf::test
