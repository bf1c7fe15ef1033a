// What the tests of the EFA-rules provider share: forked children that load libfabric (and with
// it our provider) fresh with their own environment, an endpoint with everything it needs (Node),
// and the checks of a violation's report. Each test file runs its scenarios in such children.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "support/processes.h"

namespace efa_rules_test {

inline constexpr int kOptCudaApiPermitted = 10;
inline constexpr int kOptSharedMemoryPermitted = 11;
inline constexpr int kOptEfaBase = -(0xefa << 16);
inline constexpr int kOptSendrecv128 = kOptEfaBase + 5;
inline constexpr int kOptWrite128 = kOptEfaBase + 6;
inline constexpr int kOptViolations = kOptEfaBase + 0x100;
inline constexpr int kOptHandshakeEagains = kOptEfaBase + 0x101;
inline constexpr int kProvErrnoBase = 0xefa000;

#define REQUIRE(cond)                                                                 \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #cond); \
      _exit(1);                                                                       \
    }                                                                                 \
  } while (0)

inline std::string reportPath() {
  return "/tmp/efa-rules-test-" + std::to_string(getpid()) + ".report";
}

inline std::string readReport() {
  std::ifstream in(reportPath());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Environment of a child, set before its first libfabric call.
inline void childEnv(const std::string& base) {
  setenv("FI_PROVIDER_PATH", NNF_EFA_RULES_DIR, 1);
  setenv("FI_TCP_IFACE", "lo", 1);
  unsetenv("FI_PROVIDER");
  setenv("NNF_EFA_RULES_BASE", base.c_str(), 1);
  setenv("NNF_EFA_RULES_REPORT", reportPath().c_str(), 1);
  unlink(reportPath().c_str());
  // What the plugin sets where the message-ordering option is refused (the stand-in's default).
  setenv("NCCL_PROTO", "^LL128", 1);
}

// Runs `body` in `n` (1 or 2) forked children (index 0..n-1, with a socket to the other); true
// when all exit 0 within the timeout (a REQUIRE that fails exits 1).
inline bool runChildren(int n, const std::function<void(int, int)>& body) {
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sockets) != 0) return false;
  std::vector<nnf::test::ProcessSpec> children;
  for (int i = 0; i < n; ++i) {
    children.push_back({"child " + std::to_string(i), [&body, &sockets, i] {
                          close(sockets[1 - i]);
                          body(i, sockets[i]);
                          return 0;
                        }});
  }
  nnf::test::ProcessOptions options;
  options.timeoutSec = 120;
  options.whileRunning = [&sockets](const std::vector<pid_t>&) {
    close(sockets[0]);
    close(sockets[1]);
  };
  bool ok = true;
  for (const nnf::test::ProcessEnd& end : nnf::test::runProcesses(children, options))
    ok = ok && end.asExpected;
  return ok;
}

inline void sendAll(int fd, const void* data, size_t len) {
  REQUIRE(write(fd, data, len) == static_cast<ssize_t>(len));
}
inline void recvAll(int fd, void* data, size_t len) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    REQUIRE(n > 0);
    p += n;
    len -= static_cast<size_t>(n);
  }
}

// Retries a post while the base says -FI_EAGAIN (connecting), progressing it with empty reads.
#define POST(node, call)                                                     \
  [&] {                                                                      \
    ssize_t ret_;                                                            \
    while ((ret_ = (call)) == -FI_EAGAIN) fi_cq_read((node).cq, nullptr, 0); \
    return ret_;                                                             \
  }()

// The same, progressing a second endpoint of this process too (the one the post connects to).
#define POST_WITH(node, other, call)        \
  [&] {                                     \
    ssize_t ret_;                           \
    while ((ret_ = (call)) == -FI_EAGAIN) { \
      fi_cq_read((node).cq, nullptr, 0);    \
      fi_cq_read((other).cq, nullptr, 0);   \
    }                                       \
    return ret_;                            \
  }()

struct Options {
  bool hmem = true;
  // cuda/shm permitted false, write in-order-128 true, before enable; the message option is
  // refused (as libfabric 2.4+ does), so NCCL_PROTO excludes LL128 (childEnv)
  bool cleanOptions = true;
  int nic = 0;          // the NIC (of NNF_EFA_RULES_NICS) whose domain to open
  bool source = false;  // FI_SOURCE: completions say who sent them
};

inline fi_info* query(const Options& setup) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_TAGGED | FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
                FI_REMOTE_WRITE | FI_SEND | FI_RECV | (setup.hmem ? FI_HMEM : 0) |
                (setup.source ? FI_SOURCE : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                (setup.hmem ? FI_MR_HMEM : 0);
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup("efa");
  fi_info* info = nullptr;
  int ret =
      fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  return ret == 0 ? info : nullptr;
}

struct Node {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fi_addr_t self = FI_ADDR_UNSPEC;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::string name;

  int setBool(int option, bool value) {
    return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, option, &value, sizeof(value));
  }

  // Up to the endpoint, not enabled.
  void open(const Options& setup) {
    fi_info* all = query(setup);
    REQUIRE(all != nullptr);
    // The first entry of the NIC asked for: NIC n's domain names end in "-rdm-<n>".
    std::string suffix = setup.nic == 0 ? "-rdm" : "-rdm-" + std::to_string(setup.nic);
    for (fi_info* entry = all; entry != nullptr && info == nullptr; entry = entry->next) {
      std::string domain = entry->domain_attr->name;
      if (domain.size() > suffix.size() &&
          domain.compare(domain.size() - suffix.size(), suffix.size(), suffix) == 0)
        info = fi_dupinfo(entry);
    }
    fi_freeinfo(all);
    REQUIRE(info != nullptr);
    REQUIRE(std::string(info->fabric_attr->prov_name) == "efa");
    REQUIRE(fi_fabric(info->fabric_attr, &fabric, nullptr) == 0);
    REQUIRE(fi_domain(fabric, info, &domain, nullptr) == 0);
    fi_cq_attr cqAttr{};
    cqAttr.format = FI_CQ_FORMAT_TAGGED;
    cqAttr.size = 4096;
    REQUIRE(fi_cq_open(domain, &cqAttr, &cq, nullptr) == 0);
    fi_av_attr avAttr{};
    avAttr.type = FI_AV_MAP;
    REQUIRE(fi_av_open(domain, &avAttr, &av, nullptr) == 0);
    REQUIRE(fi_endpoint(domain, info, &ep, nullptr) == 0);
    REQUIRE(fi_ep_bind(ep, &av->fid, 0) == 0);
    REQUIRE(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) == 0);
    if (setup.cleanOptions) {
      REQUIRE(setBool(kOptCudaApiPermitted, false) == 0);
      REQUIRE(setBool(kOptSharedMemoryPermitted, false) == 0);
      REQUIRE(setBool(kOptSendrecv128, true) == -FI_EOPNOTSUPP);
      REQUIRE(setBool(kOptWrite128, true) == 0);
    }
  }

  void enable() {
    REQUIRE(fi_enable(ep) == 0);
    char buf[256];
    size_t len = sizeof(buf);
    REQUIRE(fi_getname(&ep->fid, buf, &len) == 0);
    name.assign(buf, len);
    REQUIRE(fi_av_insert(av, name.data(), 1, &self, 0, nullptr) == 1);
  }

  // Adds another endpoint's name to this one's AV (both in this process).
  fi_addr_t insert(const Node& other) {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    REQUIRE(fi_av_insert(av, other.name.data(), 1, &addr, 0, nullptr) == 1);
    return addr;
  }

  void exchange(int fd) {
    uint32_t len = static_cast<uint32_t>(name.size());
    sendAll(fd, &len, sizeof(len));
    sendAll(fd, name.data(), len);
    uint32_t peerLen = 0;
    recvAll(fd, &peerLen, sizeof(peerLen));
    std::string peerName(peerLen, '\0');
    recvAll(fd, peerName.data(), peerLen);
    REQUIRE(fi_av_insert(av, peerName.data(), 1, &peer, 0, nullptr) == 1);
  }

  fid_mr* reg(void* buf, size_t len, uint64_t access, fi_hmem_iface iface = FI_HMEM_SYSTEM) {
    iovec iov{buf, len};
    fi_mr_attr attr{};
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = access;
    attr.iface = iface;
    fid_mr* mr = nullptr;
    REQUIRE(fi_mr_regattr(domain, &attr, 0, &mr) == 0);
    return mr;
  }

  // Reads one completion (success) or fails the child on an error; returns its context.
  void* waitOne(fi_cq_tagged_entry* out = nullptr) {
    fi_cq_tagged_entry entry{};
    for (int spins = 0; spins < 50000000; ++spins) {
      ssize_t n = fi_cq_read(cq, &entry, 1);
      if (n == 1) {
        if (out != nullptr) *out = entry;
        return entry.op_context;
      }
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(cq, &err, 0);
        std::fprintf(stderr, "unexpected error completion: %s\n",
                     fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0));
        _exit(1);
      }
      REQUIRE(n == -FI_EAGAIN);
    }
    REQUIRE(!"completion timed out");
    return nullptr;
  }

  // Reads the next error completion, which must come within a few reads.
  fi_cq_err_entry waitError() {
    fi_cq_tagged_entry entry{};
    for (int spins = 0; spins < 1000000; ++spins) {
      ssize_t n = fi_cq_read(cq, &entry, 1);
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        REQUIRE(fi_cq_readerr(cq, &err, 0) == 1);
        return err;
      }
      REQUIRE(n == -FI_EAGAIN);
    }
    REQUIRE(!"no error completion");
    return {};
  }

  uint64_t violations() {
    uint64_t count = 0;
    size_t len = sizeof(count);
    REQUIRE(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, kOptViolations, &count, &len) == 0);
    return count;
  }

  // The -FI_EAGAIN answers the provider gave this endpoint's posts while waiting for handshakes.
  uint64_t handshakeEagains() {
    uint64_t count = 0;
    size_t len = sizeof(count);
    REQUIRE(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, kOptHandshakeEagains, &count, &len) == 0);
    return count;
  }

  void close() {
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
  }
};

// Polls `other` (its progress) while waiting for one completion on `node`.
inline void* waitOneWith(Node& node, Node& other) {
  fi_cq_tagged_entry entry{};
  for (int spins = 0; spins < 50000000; ++spins) {
    ssize_t n = fi_cq_read(node.cq, &entry, 1);
    if (n == 1) return entry.op_context;
    REQUIRE(n == -FI_EAGAIN);
    fi_cq_read(other.cq, nullptr, 0);
  }
  REQUIRE(!"completion timed out");
  return nullptr;
}

// Checks a violation's error completion and report line.
inline void expectViolation(Node& node, const fi_cq_err_entry& err, void* context, int rule,
                            const char* name) {
  REQUIRE(err.op_context == context);
  REQUIRE(err.err == FI_EINVAL);
  REQUIRE(err.prov_errno == kProvErrnoBase + rule);
  REQUIRE(std::strstr(fi_cq_strerror(node.cq, err.prov_errno, nullptr, nullptr, 0), name));
  REQUIRE(readReport().rfind(std::string(name) + " ", 0) == 0);
}

using FakeDeclare = void (*)(void*, size_t, int);
using FakeInit = int (*)(unsigned);

// Loads the fake CUDA driver the way the plugin would, initialises it and makes `buf` device
// memory of GPU `gpu`.
inline void declareDevice(void* buf, size_t len, int gpu = 0) {
  setenv("NCCL_FABRIC_CUDA_LIBRARY", NNF_FAKE_CUDA_PATH, 1);
  void* lib = dlopen(NNF_FAKE_CUDA_PATH, RTLD_NOW);
  REQUIRE(lib != nullptr);
  auto init = reinterpret_cast<FakeInit>(dlsym(lib, "cuInit"));
  auto declare = reinterpret_cast<FakeDeclare>(dlsym(lib, "nnfFakeCudaDeclare"));
  REQUIRE(init != nullptr && declare != nullptr);
  REQUIRE(init(0) == 0);
  declare(buf, len, gpu);
}

class EfaRules : public ::testing::TestWithParam<std::string> {};

}  // namespace efa_rules_test
