#include "bootstrap.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

namespace nnf::perf {
namespace {

// Long enough for the slowest set-up step of a large sweep; short enough that a dead peer
// ends the run instead of hanging it.
constexpr int kRecvTimeoutMs = 120000;

// Rank r on the r-th CPU this process may use. Spinning ranks that the scheduler happens to
// stack on one CPU wait a whole time slice per message (milliseconds instead of microseconds);
// pinning rules that out whenever there are enough CPUs.
void pinToCpu(int rank) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != rank) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof(one), &one);
    return;
  }
}

}  // namespace

bool enoughCpusToPin(int ranks) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  return CPU_COUNT(&allowed) >= ranks;
}

Bootstrap::~Bootstrap() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

bool Bootstrap::send(int peer, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fds_[peer], p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = "bootstrap send to rank " + std::to_string(peer) + ": " + std::strerror(errno);
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool Bootstrap::recv(int peer, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    pollfd pfd{fds_[peer], POLLIN, 0};
    int ready = poll(&pfd, 1, kRecvTimeoutMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      error_ = "bootstrap: rank " + std::to_string(peer) + " sent nothing for " +
               std::to_string(kRecvTimeoutMs / 1000) + " s";
      return false;
    }
    ssize_t n = ::recv(fds_[peer], p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = "bootstrap: rank " + std::to_string(peer) +
               (n == 0 ? " went away" : std::string(": ") + std::strerror(errno));
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool Bootstrap::exchange(const std::vector<std::string>& mine, std::vector<std::string>* theirs) {
  theirs->assign(fds_.size(), std::string());
  // Everything is small (handles, addresses), so all sends fit the socket buffers before any
  // receive: no ordering deadlock between ranks.
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    uint32_t len = static_cast<uint32_t>(mine[peer].size());
    if (!send(peer, &len, sizeof(len)) || !send(peer, mine[peer].data(), len)) return false;
  }
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    uint32_t len = 0;
    if (!recv(peer, &len, sizeof(len))) return false;
    (*theirs)[peer].resize(len);
    if (len > 0 && !recv(peer, &(*theirs)[peer][0], len)) return false;
  }
  return true;
}

bool Bootstrap::barrier() {
  char token = 'b';
  if (rank_ == 0) {
    for (int peer = 1; peer < size(); ++peer)
      if (!recv(peer, &token, 1)) return false;
    for (int peer = 1; peer < size(); ++peer)
      if (!send(peer, &token, 1)) return false;
    return true;
  }
  return send(0, &token, 1) && recv(0, &token, 1);
}

int runLocalRanks(int ranks, bool pin, const RankBody& body) {
  // pairs[i][j]: rank i's end of the socketpair between i and j.
  std::vector<std::vector<int>> fds(ranks, std::vector<int>(ranks, -1));
  for (int i = 0; i < ranks; ++i) {
    for (int j = i + 1; j < ranks; ++j) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        std::perror("fabric-net-perf: socketpair");
        return 1;
      }
      fds[i][j] = sv[0];
      fds[j][i] = sv[1];
    }
  }
  std::fflush(nullptr);
  std::vector<pid_t> pids(ranks, -1);
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fabric-net-perf: fork");
      for (int k = 0; k < r; ++k) kill(pids[k], SIGKILL);
      return 1;
    }
    if (pid == 0) {
      if (pin) pinToCpu(r);
      for (int i = 0; i < ranks; ++i)
        for (int j = 0; j < ranks; ++j)
          if (i != r && fds[i][j] >= 0) close(fds[i][j]);
      int code = 0;
      {
        Bootstrap boot(r, fds[r]);
        code = body(boot);
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids[r] = pid;
  }
  for (auto& row : fds)
    for (int fd : row)
      if (fd >= 0) close(fd);

  int result = 0;
  int alive = ranks;
  auto failedAt = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < ranks; ++r) {
        if (pids[r] != pid) continue;
        pids[r] = -1;
        --alive;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok) {
          if (WIFSIGNALED(status))
            std::fprintf(stderr, "fabric-net-perf: rank %d killed by signal %d\n", r,
                         WTERMSIG(status));
          if (result == 0) failedAt = std::chrono::steady_clock::now();
          result = 1;
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    // Survivors of a failed rank usually notice on their own; if not, stop them.
    if (result != 0 && std::chrono::steady_clock::now() - failedAt > std::chrono::seconds(10)) {
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return result;
}

int runTwoHosts(bool listen, const std::string& host, int port, const std::string& key,
                const RankBody& body) {
  int fd = -1;
  if (listen) {
    int lfd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool v6 = lfd >= 0;
    if (!v6) lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage ss{};
    socklen_t len;
    if (v6) {
      // Dual stack, so that IPv4 peers are accepted too.
      setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(static_cast<uint16_t>(port));
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(static_cast<uint16_t>(port));
      len = sizeof(*a);
    }
    if (bind(lfd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(lfd, 1) != 0) {
      std::fprintf(stderr, "fabric-net-perf: cannot listen on port %d: %s\n", port,
                   std::strerror(errno));
      close(lfd);
      return 1;
    }
    std::fprintf(stderr, "fabric-net-perf: waiting for the peer on port %d\n", port);
    fd = accept(lfd, nullptr, nullptr);
    close(lfd);
  } else {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string service = std::to_string(port);
    int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) {
      std::fprintf(stderr, "fabric-net-perf: %s: %s\n", host.c_str(), gai_strerror(rc));
      return 1;
    }
    // The listening side may start a moment later: retry for a while.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (fd < 0 && std::chrono::steady_clock::now() < deadline) {
      for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0) continue;
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0)
          fd = s;
        else
          close(s);
      }
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    freeaddrinfo(res);
  }
  if (fd < 0) {
    std::fprintf(stderr, "fabric-net-perf: no connection to the peer (%s)\n",
                 listen ? "accept failed" : "connect timed out after 30 s");
    return 1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rank = listen ? 0 : 1;
  std::vector<int> fds(2, -1);
  fds[1 - rank] = fd;
  Bootstrap boot(rank, fds);
  std::vector<std::string> mine(2, key), theirs;
  if (!boot.exchange(mine, &theirs)) {
    std::fprintf(stderr, "fabric-net-perf: %s\n", boot.error().c_str());
    return 1;
  }
  if (theirs[1 - rank] != key) {
    std::fprintf(stderr,
                 "fabric-net-perf: the two sides were started with different options:\n"
                 "  here: %s\n  peer: %s\n",
                 key.c_str(), theirs[1 - rank].c_str());
    return 1;
  }
  return body(boot);
}

}  // namespace nnf::perf
