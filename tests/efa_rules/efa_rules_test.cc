// Tests of the EFA-rules provider through raw libfabric: its attributes, data movement over tcp
// and shm, out-of-order completions, and one test per rule. Each scenario runs in forked
// children, which load libfabric (and with it our provider) fresh with their own environment.
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

namespace {

constexpr int kOptCudaApiPermitted = 10;
constexpr int kOptSharedMemoryPermitted = 11;
constexpr int kOptEfaBase = -(0xefa << 16);
constexpr int kOptSendrecv128 = kOptEfaBase + 5;
constexpr int kOptWrite128 = kOptEfaBase + 6;
constexpr int kOptViolations = kOptEfaBase + 0x100;
constexpr int kProvErrnoBase = 0xefa000;

#define REQUIRE(cond)                                                                 \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #cond); \
      _exit(1);                                                                       \
    }                                                                                 \
  } while (0)

std::string reportPath() {
  return "/tmp/efa-rules-test-" + std::to_string(getpid()) + ".report";
}

std::string readReport() {
  std::ifstream in(reportPath());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Environment of a child, set before its first libfabric call.
void childEnv(const std::string& base) {
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
bool runChildren(int n, const std::function<void(int, int)>& body) {
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

void sendAll(int fd, const void* data, size_t len) {
  REQUIRE(write(fd, data, len) == static_cast<ssize_t>(len));
}
void recvAll(int fd, void* data, size_t len) {
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
  int nic = 0;               // the NIC (of NNF_EFA_RULES_NICS) whose domain to open
};

fi_info* query(const Options& setup) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_TAGGED | FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
                FI_REMOTE_WRITE | FI_SEND | FI_RECV | (setup.hmem ? FI_HMEM : 0);
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

  void close() {
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
  }
};

// Checks a violation's error completion and report line.
void expectViolation(Node& node, const fi_cq_err_entry& err, void* context, int rule,
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
// memory of GPU 0.
void declareDevice(void* buf, size_t len) {
  setenv("NCCL_FABRIC_CUDA_LIBRARY", NNF_FAKE_CUDA_PATH, 1);
  void* lib = dlopen(NNF_FAKE_CUDA_PATH, RTLD_NOW);
  REQUIRE(lib != nullptr);
  auto init = reinterpret_cast<FakeInit>(dlsym(lib, "cuInit"));
  auto declare = reinterpret_cast<FakeDeclare>(dlsym(lib, "nnfFakeCudaDeclare"));
  REQUIRE(init != nullptr && declare != nullptr);
  REQUIRE(init(0) == 0);
  declare(buf, len, 0);
}

class EfaRules : public ::testing::TestWithParam<std::string> {};

TEST_P(EfaRules, PresentsEfaAttributes) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    fi_info* info = query(Options{});
    REQUIRE(info != nullptr);
    for (fi_info* entry = info; entry != nullptr; entry = entry->next) {
      REQUIRE(std::string(entry->fabric_attr->prov_name) == "efa");
      REQUIRE(std::string(entry->fabric_attr->name) == "efa");
      std::string domain = entry->domain_attr->name;
      REQUIRE(domain.rfind("efa-", 0) == 0 && domain.size() > 8);
      REQUIRE(domain.substr(domain.size() - 4) == "-rdm");
      uint64_t mrMode = static_cast<uint64_t>(entry->domain_attr->mr_mode);
      uint64_t want = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_HMEM;
      REQUIRE(mrMode == want);
      REQUIRE(entry->caps & FI_HMEM);
      REQUIRE((entry->caps & (FI_TAGGED | FI_RMA)) == (FI_TAGGED | FI_RMA));
      REQUIRE(entry->ep_attr->type == FI_EP_RDM);
      REQUIRE(entry->ep_attr->mem_tag_format == 0xAAAAAAAAAAAAAAAAULL);
      REQUIRE(entry->domain_attr->cq_data_size == 8);
      REQUIRE(entry->tx_attr->inject_size <= 4032);
    }
    fi_freeinfo(info);
    // Narrower tags and no FI_HMEM on demand.
    setenv("NNF_EFA_RULES_TAG_BITS", "48", 1);
    setenv("NNF_EFA_RULES_HMEM", "0", 1);
    Options host;
    host.hmem = false;
    info = query(host);
    REQUIRE(info != nullptr);
    REQUIRE(info->ep_attr->mem_tag_format == (1ULL << 48) - 1);
    REQUIRE((info->caps & FI_HMEM) == 0);
    REQUIRE((info->domain_attr->mr_mode & FI_MR_HMEM) == 0);
    fi_freeinfo(info);
    REQUIRE(query(Options{}) == nullptr);  // FI_HMEM asked for, not offered
  }));
}

// Tagged messages, RMA writedata and read between two processes, with every rule kept: the
// bytes arrive and nothing is reported.
TEST_P(EfaRules, MovesBytesAndReportsNothingWhenRulesAreKept) {
  EXPECT_TRUE(runChildren(2, [&](int me, int fd) {
    childEnv(GetParam());
    Node node;
    node.open(Options{});
    node.enable();
    node.exchange(fd);
    constexpr size_t kSize = 256 * 1024;
    std::vector<unsigned char> buf(kSize);
    fid_mr* mr =
        node.reg(buf.data(), kSize,
                 FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
    fi_context2 ctx{};
    if (me == 0) {
      // Receive a tagged message, then expose the buffer for the peer's write and read.
      REQUIRE(POST(node, fi_trecv(node.ep, buf.data(), kSize, fi_mr_desc(mr), node.peer, 7, 0,
                                  &ctx)) == 0);
      REQUIRE(node.waitOne() == &ctx);
      for (size_t i = 0; i < kSize; ++i) REQUIRE(buf[i] == static_cast<unsigned char>(i * 7));
      uint64_t target[2] = {reinterpret_cast<uintptr_t>(buf.data()), fi_mr_key(mr)};
      sendAll(fd, target, sizeof(target));
      fi_cq_tagged_entry entry{};
      node.waitOne(&entry);  // the remote write's data
      REQUIRE((entry.flags & FI_REMOTE_CQ_DATA) && entry.data == 0x1234);
      for (size_t i = 0; i < 4096; ++i) REQUIRE(buf[i] == static_cast<unsigned char>(i * 3));
      // The write's local completion does not order a later read after it (no FI_ORDER_RAW;
      // shm reads the target's memory directly): the reader waits for this word.
      char seen = 1;
      sendAll(fd, &seen, 1);
      // Progress the peer's read (manual progress) until it says it is done.
      pollfd ready{fd, POLLIN, 0};
      while (poll(&ready, 1, 0) == 0) fi_cq_read(node.cq, nullptr, 0);
      char done = 0;
      recvAll(fd, &done, 1);
    } else {
      for (size_t i = 0; i < kSize; ++i) buf[i] = static_cast<unsigned char>(i * 7);
      REQUIRE(POST(node,
                   fi_tsend(node.ep, buf.data(), kSize, fi_mr_desc(mr), node.peer, 7, &ctx)) == 0);
      REQUIRE(node.waitOne() == &ctx);
      uint64_t target[2];
      recvAll(fd, target, sizeof(target));
      for (size_t i = 0; i < 4096; ++i) buf[i] = static_cast<unsigned char>(i * 3);
      REQUIRE(POST(node, fi_writedata(node.ep, buf.data(), 4096, fi_mr_desc(mr), 0x1234, node.peer,
                                      target[0], target[1], &ctx)) == 0);
      REQUIRE(node.waitOne() == &ctx);
      pollfd written{fd, POLLIN, 0};
      while (poll(&written, 1, 0) == 0) fi_cq_read(node.cq, nullptr, 0);
      char seen = 0;
      recvAll(fd, &seen, 1);
      std::vector<unsigned char> back(4096);
      fid_mr* backMr = node.reg(back.data(), back.size(), FI_READ);
      REQUIRE(POST(node, fi_read(node.ep, back.data(), back.size(), fi_mr_desc(backMr), node.peer,
                                 target[0], target[1], &ctx)) == 0);
      REQUIRE(node.waitOne() == &ctx);
      for (size_t i = 0; i < 4096; ++i) REQUIRE(back[i] == static_cast<unsigned char>(i * 3));
      char done = 1;
      sendAll(fd, &done, 1);
      fi_close(&backMr->fid);
    }
    REQUIRE(node.violations() == 0);
    REQUIRE(readReport().empty());
    fi_close(&mr->fid);
    node.close();
  }));
}

// 1200 tagged messages in batches: every completion arrives exactly once, and not always in
// posting order.
TEST_P(EfaRules, ReordersCompletionsWithoutLosingAny) {
  EXPECT_TRUE(runChildren(2, [&](int me, int fd) {
    childEnv(GetParam());
    Node node;
    node.open(Options{});
    node.enable();
    node.exchange(fd);
    constexpr int kBatch = 200;
    constexpr int kMessages = 1200;
    std::vector<uint64_t> slots(kMessages);
    fid_mr* mr = node.reg(slots.data(), slots.size() * sizeof(uint64_t), FI_SEND | FI_RECV);
    std::vector<fi_context2> contexts(kMessages);
    std::set<int> seen;
    bool outOfOrder = false;
    for (int first = 0; first < kMessages; first += kBatch) {
      for (int i = first; i < first + kBatch; ++i) {
        slots[i] = me == 1 ? 0xabc000 + i : 0;
        ssize_t ret;
        do {
          ret = me == 0
                    ? fi_trecv(node.ep, &slots[i], 8, fi_mr_desc(mr), node.peer, i, 0, &contexts[i])
                    : fi_tsend(node.ep, &slots[i], 8, fi_mr_desc(mr), node.peer, i, &contexts[i]);
        } while (ret == -FI_EAGAIN);
        REQUIRE(ret == 0);
      }
      int last = first - 1;
      for (int done = 0; done < kBatch; ++done) {
        void* ctx = node.waitOne();
        int index = static_cast<int>(static_cast<fi_context2*>(ctx) - contexts.data());
        REQUIRE(index >= first && index < first + kBatch);
        REQUIRE(seen.insert(index).second);
        if (index < last) outOfOrder = true;
        last = index;
        if (me == 0) REQUIRE(slots[index] == 0xabc000u + static_cast<unsigned>(index));
      }
    }
    REQUIRE(static_cast<int>(seen.size()) == kMessages);
    REQUIRE(outOfOrder);
    fi_close(&mr->fid);
    node.close();
  }));
}

TEST_P(EfaRules, MissingDescriptorFailsThePost) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Node node;
    node.open(Options{});
    node.enable();
    std::vector<char> buf(8192), other(64);
    fi_context2 ctx{};
    REQUIRE(POST(node, fi_tsend(node.ep, buf.data(), 64, nullptr, node.self, 1, &ctx)) == 0);
    expectViolation(node, node.waitError(), &ctx, 1, "missing-descriptor");
    // A descriptor of another buffer does not cover this one.
    fid_mr* mr = node.reg(other.data(), other.size(), FI_RECV);
    REQUIRE(POST(node, fi_trecv(node.ep, buf.data(), 64, fi_mr_desc(mr), node.self, 1, 0, &ctx)) ==
            0);
    REQUIRE(node.waitError().prov_errno == kProvErrnoBase + 1);
    REQUIRE(node.violations() == 2);
    fi_close(&mr->fid);
    node.close();
  }));
}

TEST_P(EfaRules, InjectFromDeviceMemoryIsRefused) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    std::vector<char> device(4096), registered(4096), host(64);
    declareDevice(device.data(), device.size());
    Node node;
    node.open(Options{});
    node.enable();
    REQUIRE(POST(node, fi_tinject(node.ep, device.data() + 128, 64, node.self, 1)) == -FI_EINVAL);
    REQUIRE(readReport().rfind("inject-device-memory ", 0) == 0);
    // Memory registered as CUDA memory counts too, even where the driver never saw it.
    fid_mr* mr = node.reg(registered.data(), registered.size(), FI_SEND, FI_HMEM_CUDA);
    REQUIRE(POST(node, fi_inject(node.ep, registered.data(), 16, node.self)) == -FI_EINVAL);
    REQUIRE(POST(node, fi_tinjectdata(node.ep, registered.data(), 16, 5, node.self, 1)) ==
            -FI_EINVAL);
    REQUIRE(node.violations() == 3);
    // Host memory injects fine.
    REQUIRE(POST(node, fi_tinject(node.ep, host.data(), 16, node.self, 1)) == 0);
    REQUIRE(node.violations() == 3);
    fi_context2 ctx{};
    std::vector<char> sink(64);
    fid_mr* sinkMr = node.reg(sink.data(), sink.size(), FI_RECV);
    REQUIRE(POST(node, fi_trecv(node.ep, sink.data(), 64, fi_mr_desc(sinkMr), node.self, 1, 0,
                                &ctx)) == 0);
    REQUIRE(node.waitOne() == &ctx);
    fi_close(&sinkMr->fid);
    fi_close(&mr->fid);
    node.close();
  }));
}

TEST_P(EfaRules, OptionAfterEnableIsRefused) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Node node;
    node.open(Options{});
    node.enable();
    REQUIRE(node.setBool(kOptSendrecv128, true) == -FI_EOPBADSTATE);
    REQUIRE(readReport().rfind("option-after-enable ", 0) == 0);
    REQUIRE(node.violations() == 1);
    node.close();
  }));
}

TEST_P(EfaRules, TagOutsideTheFormatFailsThePost) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    setenv("NNF_EFA_RULES_TAG_BITS", "48", 1);
    Node node;
    node.open(Options{});
    node.enable();
    std::vector<char> buf(64);
    fid_mr* mr = node.reg(buf.data(), buf.size(), FI_SEND | FI_RECV);
    fi_context2 ctx{};
    REQUIRE(POST(node, fi_tsend(node.ep, buf.data(), 64, fi_mr_desc(mr), node.self, 1ULL << 50,
                                &ctx)) == 0);
    expectViolation(node, node.waitError(), &ctx, 4, "tag-format");
    REQUIRE(POST(node, fi_trecv(node.ep, buf.data(), 64, fi_mr_desc(mr), node.self, 1, ~0ULL,
                                &ctx)) == 0);
    REQUIRE(node.waitError().prov_errno == kProvErrnoBase + 4);
    fi_close(&mr->fid);
    node.close();
  }));
}

TEST_P(EfaRules, EnableWithCudaApiPermittedIsReported) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Node node;
    Options setup;
    setup.cleanOptions = false;
    node.open(setup);
    node.enable();
    REQUIRE(readReport().rfind("cuda-api-permitted ", 0) == 0);
    REQUIRE(node.violations() == 1);
    node.close();
  }));
}

TEST_P(EfaRules, ReadFromOwnAddressNeedsSharedMemoryOff) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Node node;
    Options setup;
    setup.cleanOptions = false;
    setup.hmem = false;  // keep cuda-api-permitted and ll128-order out of this test
    node.open(setup);
    node.enable();
    std::vector<char> word(8), flushed(8);
    fid_mr* src = node.reg(word.data(), word.size(), FI_REMOTE_READ);
    fid_mr* dst = node.reg(flushed.data(), flushed.size(), FI_READ);
    fi_context2 ctx{};
    REQUIRE(POST(node, fi_read(node.ep, flushed.data(), 8, fi_mr_desc(dst), node.self,
                               reinterpret_cast<uintptr_t>(word.data()), fi_mr_key(src), &ctx)) ==
            0);
    expectViolation(node, node.waitError(), &ctx, 6, "shared-memory-read");
    REQUIRE(node.violations() == 1);
    fi_close(&dst->fid);
    fi_close(&src->fid);
    node.close();
  }));
}

// The rule follows NCCL's reading of NCCL_PROTO: LL and Simple are safe without the ordering,
// LL128 is not, and '^' forces on what it does not name.
TEST_P(EfaRules, TransferWithoutInOrder128IsReportedWhereNcclMayRunLL128) {
  for (const char* proto : {"", "Simple", "^LL128", "LL,Simple", "LL128", "^LL"}) {
    const bool risky = *proto == '\0' || std::strcmp(proto, "LL128") == 0 ||
                       std::strcmp(proto, "^LL") == 0;
    EXPECT_TRUE(runChildren(1, [&](int, int) {
      childEnv(GetParam());
      if (*proto != '\0')
        setenv("NCCL_PROTO", proto, 1);
      else
        unsetenv("NCCL_PROTO");
      Node node;
      Options setup;
      setup.cleanOptions = false;
      node.open(setup);
      REQUIRE(node.setBool(kOptCudaApiPermitted, false) == 0);
      REQUIRE(node.setBool(kOptSharedMemoryPermitted, false) == 0);
      node.enable();
      std::vector<char> buf(64);
      fid_mr* mr = node.reg(buf.data(), buf.size(), FI_SEND | FI_RECV);
      fi_context2 ctx{};
      // A receive is not where the rule looks (under rdma tagged receives are drains).
      REQUIRE(POST(node,
                   fi_trecv(node.ep, buf.data(), 64, fi_mr_desc(mr), node.self, 1, 0, &ctx)) == 0);
      fi_context2 sendCtx{};
      REQUIRE(POST(node,
                   fi_tsend(node.ep, buf.data(), 64, fi_mr_desc(mr), node.self, 1, &sendCtx)) == 0);
      if (risky) {
        expectViolation(node, node.waitError(), &sendCtx, 7, "ll128-order");
        // Once per endpoint: the next post goes through.
        REQUIRE(POST(node, fi_tsend(node.ep, buf.data(), 64, fi_mr_desc(mr), node.self, 1,
                                    &sendCtx)) == 0);
      }
      node.waitOne();
      node.waitOne();
      REQUIRE(node.violations() == (risky ? 1u : 0u));
      fi_close(&mr->fid);
      node.close();
    }));
  }
}

TEST_P(EfaRules, RefusedOptionsReturnNotSupported) {
  const char* names[] = {"cuda_api_permitted", "shared_memory_permitted",
                         "sendrecv_in_order_aligned_128_bytes", "write_in_order_aligned_128_bytes"};
  const int options[] = {kOptCudaApiPermitted, kOptSharedMemoryPermitted, kOptSendrecv128,
                         kOptWrite128};
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(runChildren(1, [&](int, int) {
      childEnv(GetParam());
      setenv("NNF_EFA_RULES_SENDRECV_ORDER", "1", 1);  // only the named option refused
      setenv("NNF_EFA_RULES_REFUSE", names[i], 1);
      Node node;
      Options setup;
      setup.cleanOptions = false;
      node.open(setup);
      for (int j = 0; j < 4; ++j) {
        bool value = j >= 2;
        REQUIRE(node.setBool(options[j], value) == (i == j ? -FI_EOPNOTSUPP : 0));
      }
      node.close();
    })) << names[i];
  }
}

// As libfabric 2.4 and later: the message-ordering option is refused by default, the write one
// taken; NNF_EFA_RULES_SENDRECV_ORDER=1 brings the older behaviour back.
TEST_P(EfaRules, MessageOrderingIsRefusedByDefault) {
  for (const char* accept : {"", "1"}) {
    EXPECT_TRUE(runChildren(1, [&](int, int) {
      childEnv(GetParam());
      if (*accept != '\0') setenv("NNF_EFA_RULES_SENDRECV_ORDER", accept, 1);
      Node node;
      Options setup;
      setup.cleanOptions = false;
      node.open(setup);
      REQUIRE(node.setBool(kOptSendrecv128, true) == (*accept != '\0' ? 0 : -FI_EOPNOTSUPP));
      REQUIRE(node.setBool(kOptWrite128, true) == 0);
      node.close();
    })) << "NNF_EFA_RULES_SENDRECV_ORDER=" << accept;
  }
}

// NNF_EFA_RULES_HMEM_BASE=1 (the GPU check, tests/gpu): device memory reaches the base as
// FI_HMEM_CUDA, and the base must offer FI_HMEM (shm does, tcp does not). No libfabric here
// takes CUDA memory (CI has no GPU), so the registration that the default mode hands to the base
// as host memory is now refused by the base; host memory registers in both modes.
TEST(EfaRulesHmemBase, DeviceMemoryGoesToTheBaseAsCudaMemory) {
  for (const char* mode : {"0", "1"}) {
    EXPECT_TRUE(runChildren(1,
                            [&](int, int) {
                              childEnv("shm");
                              setenv("NNF_EFA_RULES_HMEM_BASE", mode, 1);
                              Node node;
                              node.open(Options{});
                              std::vector<char> device(1 << 16), host(1 << 16);
                              auto regattr = [&](std::vector<char>& buffer, fi_hmem_iface iface) {
                                iovec iov{buffer.data(), buffer.size()};
                                fi_mr_attr attr{};
                                attr.mr_iov = &iov;
                                attr.iov_count = 1;
                                attr.access = FI_SEND | FI_RECV;
                                attr.iface = iface;
                                fid_mr* mr = nullptr;
                                int ret = fi_mr_regattr(node.domain, &attr, 0, &mr);
                                if (mr != nullptr) fi_close(&mr->fid);
                                return ret;
                              };
                              REQUIRE(regattr(host, FI_HMEM_SYSTEM) == 0);
                              int cuda = regattr(device, FI_HMEM_CUDA);
                              REQUIRE((cuda == 0) == (std::strcmp(mode, "0") == 0));
                              node.close();
                            }))
        << "NNF_EFA_RULES_HMEM_BASE=" << mode;
  }
  // A base without FI_HMEM cannot carry real device memory: no FI_HMEM endpoint is offered.
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv("tcp");
    setenv("NNF_EFA_RULES_HMEM_BASE", "1", 1);
    REQUIRE(query(Options{}) == nullptr);
  }));
}

// --- several NICs (NNF_EFA_RULES_NICS)

std::string statsPath() {
  return "/tmp/efa-rules-test-" + std::to_string(getpid()) + ".stats";
}

// A child's environment for NICs tests: `nics` NICs, traffic written to statsPath().
void nicsEnv(const std::string& base, int nics) {
  childEnv(base);
  setenv("NNF_EFA_RULES_NICS", std::to_string(nics).c_str(), 1);
  setenv("NNF_EFA_RULES_STATS", statsPath().c_str(), 1);
  unlink(statsPath().c_str());
}

// NICs 0 and 1 of a two-NIC child, opened but not enabled (a test may bind first).
void openTwoNics(const std::string& base, Node& nic0, Node& nic1) {
  nicsEnv(base, 2);
  Options second;
  second.nic = 1;
  nic0.open(Options{});
  nic1.open(second);
}

// The last "<domain> <written> <sent> <read> <pid>" line of each domain for this process.
std::map<std::string, std::pair<uint64_t, uint64_t>> readStats() {
  std::map<std::string, std::pair<uint64_t, uint64_t>> traffic;
  std::ifstream in(statsPath());
  std::string domain;
  uint64_t written = 0, sent = 0, read = 0;
  long pid = 0;
  while (in >> domain >> written >> sent >> read >> pid) {
    if (pid == getpid()) traffic[domain] = {written, sent};
  }
  return traffic;
}

// Has the provider, loaded by libfabric in this process, write its totals now.
void writeStatsNow() {
  std::string path = std::string(NNF_EFA_RULES_DIR) + "/libefa-rules-fi.so";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib != nullptr);
  auto write = reinterpret_cast<int (*)()>(dlsym(lib, "nnf_efa_rules_write_stats"));
  REQUIRE(write != nullptr);
  REQUIRE(write() == 0);
  dlclose(lib);
}

// Polls `other` (its progress) while waiting for one completion on `node`.
void* waitOneWith(Node& node, Node& other) {
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

TEST_P(EfaRules, PresentsOneDomainPerNic) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    fi_info* info = query(Options{});
    REQUIRE(info != nullptr);
    std::string single = info->domain_attr->name;  // one NIC: today's name, no suffix
    size_t perNic = 0;
    for (fi_info* entry = info; entry != nullptr; entry = entry->next) {
      REQUIRE(single == entry->domain_attr->name);
      ++perNic;
    }
    fi_freeinfo(info);
    setenv("NNF_EFA_RULES_NICS", "3", 1);
    info = query(Options{});
    REQUIRE(info != nullptr);
    std::vector<std::string> names;
    for (fi_info* entry = info; entry != nullptr; entry = entry->next)
      names.push_back(entry->domain_attr->name);
    fi_freeinfo(info);
    // NIC by NIC, each with every base entry: NIC 0 keeps the single NIC's name.
    REQUIRE(names.size() == 3 * perNic);
    for (size_t i = 0; i < names.size(); ++i) {
      size_t nic = i / perNic;
      REQUIRE(names[i] == (nic == 0 ? single : single + "-" + std::to_string(nic)));
    }
    // A hint naming one NIC's domain gets that NIC only.
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("efa");
    hints->domain_attr->name = strdup((single + "-2").c_str());
    REQUIRE(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints,
                       &info) == 0);
    for (fi_info* entry = info; entry != nullptr; entry = entry->next)
      REQUIRE(std::string(entry->domain_attr->name) == single + "-2");
    fi_freeinfo(info);
    fi_freeinfo(hints);
    // Out of range: one NIC, as unset.
    setenv("NNF_EFA_RULES_NICS", "9", 1);
    info = query(Options{});
    REQUIRE(info != nullptr);
    for (fi_info* entry = info; entry != nullptr; entry = entry->next)
      REQUIRE(single == entry->domain_attr->name);
    fi_freeinfo(info);
  }));
}

// Each NIC's domain opens its own base domain: endpoints of two NICs in one process move a
// message between them, and nothing is reported when each uses its own NIC's descriptors.
TEST_P(EfaRules, NicsMoveBytesWithTheirOwnDescriptors) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    Node nic0, nic1;
    openTwoNics(GetParam(), nic0, nic1);
    REQUIRE(std::string(nic0.info->domain_attr->name) + "-1" == nic1.info->domain_attr->name);
    nic0.enable();
    nic1.enable();
    fi_addr_t to1 = nic0.insert(nic1);
    std::vector<char> out(5000, 'x'), in(5000, 0);
    fid_mr* outMr = nic0.reg(out.data(), out.size(), FI_SEND);
    fid_mr* inMr = nic1.reg(in.data(), in.size(), FI_RECV);
    fi_context2 sendCtx{}, recvCtx{};
    REQUIRE(POST(nic1, fi_trecv(nic1.ep, in.data(), in.size(), fi_mr_desc(inMr), FI_ADDR_UNSPEC, 3,
                                0, &recvCtx)) == 0);
    REQUIRE(POST_WITH(nic0, nic1,
                      fi_tsend(nic0.ep, out.data(), out.size(), fi_mr_desc(outMr), to1, 3,
                               &sendCtx)) == 0);
    REQUIRE(waitOneWith(nic0, nic1) == &sendCtx);
    REQUIRE(waitOneWith(nic1, nic0) == &recvCtx);
    REQUIRE(in == out);
    REQUIRE(nic0.violations() == 0);
    REQUIRE(readReport().empty());
    fi_close(&inMr->fid);
    fi_close(&outMr->fid);
    nic1.close();
    nic0.close();
  }));
}

// Deliberate breakage: a descriptor of NIC 1's MR posted on NIC 0's endpoint (send, receive and
// write), and NIC 1's AV and CQ bound to NIC 0's endpoint.
TEST_P(EfaRules, DescriptorOfAnotherNicFailsThePost) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    Node nic0, nic1;
    openTwoNics(GetParam(), nic0, nic1);
    // Binding another NIC's AV or CQ is refused before enable.
    fid_av* otherAv = nullptr;
    fi_av_attr avAttr{};
    avAttr.type = FI_AV_MAP;
    REQUIRE(fi_av_open(nic1.domain, &avAttr, &otherAv, nullptr) == 0);
    REQUIRE(fi_ep_bind(nic0.ep, &otherAv->fid, 0) == -FI_EINVAL);
    REQUIRE(readReport().rfind("wrong-domain fi_ep_bind of an AV", 0) == 0);
    REQUIRE(fi_ep_bind(nic0.ep, &nic1.cq->fid, FI_TRANSMIT) == -FI_EINVAL);
    REQUIRE(nic0.violations() == 2);
    fi_close(&otherAv->fid);
    unlink(reportPath().c_str());
    nic0.enable();
    nic1.enable();
    std::vector<char> buf(4096);
    fid_mr* mr1 = nic1.reg(buf.data(), buf.size(), FI_SEND | FI_RECV | FI_WRITE);
    fi_context2 ctx{};
    REQUIRE(POST(nic0, fi_tsend(nic0.ep, buf.data(), 64, fi_mr_desc(mr1), nic0.self, 1, &ctx)) ==
            0);
    expectViolation(nic0, nic0.waitError(), &ctx, 9, "wrong-domain");
    REQUIRE(POST(nic0, fi_trecv(nic0.ep, buf.data(), 64, fi_mr_desc(mr1), nic0.self, 1, 0, &ctx)) ==
            0);
    REQUIRE(nic0.waitError().prov_errno == kProvErrnoBase + 9);
    // The target is right (NIC 0's own key); the local descriptor is NIC 1's.
    std::vector<char> target(64);
    fid_mr* targetMr = nic0.reg(target.data(), target.size(), FI_REMOTE_WRITE);
    REQUIRE(POST(nic0, fi_write(nic0.ep, buf.data(), 64, fi_mr_desc(mr1), nic0.self,
                                reinterpret_cast<uintptr_t>(target.data()), fi_mr_key(targetMr),
                                &ctx)) == 0);
    REQUIRE(nic0.waitError().prov_errno == kProvErrnoBase + 9);
    REQUIRE(nic0.violations() == 5);
    fi_close(&targetMr->fid);
    fi_close(&mr1->fid);
    nic1.close();
    nic0.close();
  }));
}

// Deliberate breakage across processes: the initiator writes (and reads) through its NIC 0
// endpoint to the target's NIC 0 endpoint with the key the target registered on NIC 1. The
// same RMA with the NIC 0 key goes through and lands.
TEST_P(EfaRules, RemoteKeyOfAnotherNicFailsTheRma) {
  EXPECT_TRUE(runChildren(2, [&](int me, int fd) {
    Node nic0, nic1;
    openTwoNics(GetParam(), nic0, nic1);
    nic0.enable();
    nic1.enable();
    nic0.exchange(fd);  // NIC 0 to NIC 0: the rail the plugin would pair
    constexpr size_t kSize = 4096;
    std::vector<unsigned char> buf(kSize, 0);
    uint64_t access = FI_WRITE | FI_READ | FI_REMOTE_WRITE | FI_REMOTE_READ;
    fid_mr* mr0 = nic0.reg(buf.data(), kSize, access);
    fid_mr* mr1 = nic1.reg(buf.data(), kSize, access);
    if (me == 0) {
      uint64_t target[3] = {reinterpret_cast<uintptr_t>(buf.data()), fi_mr_key(mr0),
                            fi_mr_key(mr1)};
      REQUIRE(target[1] != target[2]);
      sendAll(fd, target, sizeof(target));
      // Only the good write arrives: its immediate data says so.
      fi_cq_tagged_entry entry{};
      nic0.waitOne(&entry);
      REQUIRE((entry.flags & FI_REMOTE_CQ_DATA) && entry.data == 8);
      for (size_t i = 0; i < kSize; ++i) REQUIRE(buf[i] == static_cast<unsigned char>(i * 5));
      char done = 0;
      recvAll(fd, &done, 1);
    } else {
      uint64_t target[3];
      recvAll(fd, target, sizeof(target));
      for (size_t i = 0; i < kSize; ++i) buf[i] = static_cast<unsigned char>(i * 5);
      fi_context2 ctx{};
      REQUIRE(POST(nic0, fi_write(nic0.ep, buf.data(), kSize, fi_mr_desc(mr0), nic0.peer, target[0],
                                  target[2], &ctx)) == 0);
      fi_cq_err_entry err = nic0.waitError();
      expectViolation(nic0, err, &ctx, 10, "remote-key-domain");
      REQUIRE(readReport().find("key of NIC 1, but the target endpoint is on NIC 0") !=
              std::string::npos);
      REQUIRE(POST(nic0, fi_writedata(nic0.ep, buf.data(), kSize, fi_mr_desc(mr0), 7, nic0.peer,
                                      target[0], target[2], &ctx)) == 0);
      REQUIRE(nic0.waitError().prov_errno == kProvErrnoBase + 10);
      REQUIRE(POST(nic0, fi_read(nic0.ep, buf.data(), 8, fi_mr_desc(mr0), nic0.peer, target[0],
                                 target[2], &ctx)) == 0);
      REQUIRE(nic0.waitError().prov_errno == kProvErrnoBase + 10);
      iovec iov{buf.data(), kSize};
      void* desc = fi_mr_desc(mr0);
      fi_rma_iov rma{target[0], kSize, target[2]};
      fi_msg_rma msg{&iov, &desc, 1, nic0.peer, &rma, 1, &ctx, 0};
      REQUIRE(POST(nic0, fi_writemsg(nic0.ep, &msg, 0)) == 0);
      REQUIRE(nic0.waitError().prov_errno == kProvErrnoBase + 10);
      REQUIRE(nic0.violations() == 4);
      // The right key.
      REQUIRE(POST(nic0, fi_writedata(nic0.ep, buf.data(), kSize, fi_mr_desc(mr0), 8, nic0.peer,
                                      target[0], target[1], &ctx)) == 0);
      REQUIRE(nic0.waitOne() == &ctx);
      REQUIRE(nic0.violations() == 4);
      char done = 1;
      sendAll(fd, &done, 1);
    }
    fi_close(&mr1->fid);
    fi_close(&mr0->fid);
    nic1.close();
    nic0.close();
  }));
}

// Bytes written by RMA and sent, per domain name, as the initiator posted them: on demand, and
// again (totals) when the domains close.
TEST_P(EfaRules, CountsTrafficPerDomain) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    Node nic0, nic1;
    openTwoNics(GetParam(), nic0, nic1);
    nic0.enable();
    nic1.enable();
    std::string name0 = nic0.info->domain_attr->name, name1 = nic1.info->domain_attr->name;
    fi_addr_t to0 = nic1.insert(nic0);
    fi_addr_t to1 = nic0.insert(nic1);
    std::vector<char> a(3000, 'a'), b(3000, 0);
    fid_mr* mrA = nic0.reg(a.data(), a.size(), FI_SEND | FI_REMOTE_WRITE);
    fid_mr* mrB = nic1.reg(b.data(), b.size(), FI_RECV | FI_WRITE);
    fi_context2 sendCtx{}, recvCtx{}, writeCtx{};
    // NIC 0 sends 1000 bytes to NIC 1; NIC 1 writes 3000 into NIC 0's buffer.
    REQUIRE(POST(nic1, fi_trecv(nic1.ep, b.data(), 1000, fi_mr_desc(mrB), FI_ADDR_UNSPEC, 9, 0,
                                &recvCtx)) == 0);
    REQUIRE(POST_WITH(nic0, nic1,
                      fi_tsend(nic0.ep, a.data(), 1000, fi_mr_desc(mrA), to1, 9, &sendCtx)) == 0);
    REQUIRE(waitOneWith(nic0, nic1) == &sendCtx);
    REQUIRE(waitOneWith(nic1, nic0) == &recvCtx);
    REQUIRE(POST_WITH(nic1, nic0,
                      fi_write(nic1.ep, b.data(), 3000, fi_mr_desc(mrB), to0,
                               reinterpret_cast<uintptr_t>(a.data()), fi_mr_key(mrA), &writeCtx)) ==
            0);
    REQUIRE(waitOneWith(nic1, nic0) == &writeCtx);
    REQUIRE(readReport().empty());
    writeStatsNow();
    auto traffic = readStats();
    REQUIRE(traffic.size() == 2);
    REQUIRE(traffic[name0] == std::make_pair(uint64_t{0}, uint64_t{1000}));
    REQUIRE(traffic[name1] == std::make_pair(uint64_t{3000}, uint64_t{0}));
    // An inject counts as sent; a post the rules refuse counts nothing.
    REQUIRE(POST_WITH(nic0, nic1, fi_tinject(nic0.ep, a.data(), 16, to1, 10)) == 0);
    REQUIRE(POST(nic0, fi_tsend(nic0.ep, a.data(), 64, nullptr, to1, 9, &sendCtx)) == 0);
    REQUIRE(nic0.waitError().prov_errno == kProvErrnoBase + 1);
    fi_close(&mrB->fid);
    fi_close(&mrA->fid);
    nic1.close();
    nic0.close();  // closing writes the totals again
    traffic = readStats();
    REQUIRE(traffic[name0] == std::make_pair(uint64_t{0}, uint64_t{1016}));
    REQUIRE(traffic[name1] == std::make_pair(uint64_t{3000}, uint64_t{0}));
    unlink(statsPath().c_str());
  }));
}

INSTANTIATE_TEST_SUITE_P(Base, EfaRules, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
