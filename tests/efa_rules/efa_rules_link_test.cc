// Tests of the EFA-rules provider's links that go down in the middle of a run and come back
// (link.cc): after K operations and for K2 more (NNF_EFA_RULES_FAIL_AFTER_OPS), after T ms for
// T2 ms (NNF_EFA_RULES_FAIL_AFTER_MS), and while a control file names the NIC
// (NNF_EFA_RULES_FAIL_FILE); what a down link does to operations posted on it, addressed to it
// from another process, and in flight when it went down.
#include <fcntl.h>

#include <chrono>
#include <thread>

#include "test_node.h"

namespace {

using namespace efa_rules_test;

inline constexpr int kOptLinkDown = kOptEfaBase + 0x102;
inline constexpr int kOptLinkFailed = kOptEfaBase + 0x103;
inline constexpr int kOptLinkWithheld = kOptEfaBase + 0x104;
inline constexpr int kOptLinkForgotten = kOptEfaBase + 0x105;
constexpr int kEstablishedRecvUnresp = 4124;  // EFA's prov_errno: the peer answered before
constexpr int kUnreachRemote = 15;            // EFA's prov_errno: the peer never answered

std::string controlPath() {
  return "/tmp/efa-rules-test-" + std::to_string(getpid()) + ".links";
}

void writeControl(const std::string& path, const char* text) {
  std::string temp = path + ".new";
  FILE* file = std::fopen(temp.c_str(), "w");
  REQUIRE(file != nullptr);
  std::fputs(text, file);
  REQUIRE(std::fclose(file) == 0);
  REQUIRE(std::rename(temp.c_str(), path.c_str()) == 0);
}

// A child with two NICs (links are told apart by NIC) and the link controls in `controls`.
void linkEnv(const std::string& base, const std::vector<std::pair<const char*, std::string>>& env) {
  childEnv(base);
  setenv("NNF_EFA_RULES_NICS", "2", 1);
  for (const auto& [name, value] : env) setenv(name, value.c_str(), 1);
}

// Endpoints on NIC 0 and NIC 1 of the child, enabled (links are told apart by NIC).
void openNicPair(Node& nic0, Node& nic1) {
  Options second;
  second.nic = 1;
  nic0.open(Options{});
  nic1.open(second);
  nic0.enable();
  nic1.enable();
}

uint32_t downMask(Node& node) {
  uint32_t mask = 0;
  size_t len = sizeof(mask);
  REQUIRE(fi_getopt(&node.ep->fid, FI_OPT_ENDPOINT, kOptLinkDown, &mask, &len) == 0);
  return mask;
}

uint64_t failedByLinks(Node& node) {
  uint64_t count = 0;
  size_t len = sizeof(count);
  REQUIRE(fi_getopt(&node.ep->fid, FI_OPT_ENDPOINT, kOptLinkFailed, &count, &len) == 0);
  return count;
}

uint64_t counter(Node& node, int option) {
  uint64_t count = 0;
  size_t len = sizeof(count);
  REQUIRE(fi_getopt(&node.ep->fid, FI_OPT_ENDPOINT, option, &count, &len) == 0);
  return count;
}

// The next error on `node`'s queue, progressing `other` while none is there.
fi_cq_err_entry waitErrorWith(Node& node, Node& other) {
  fi_cq_tagged_entry entry{};
  for (int spins = 0; spins < 5000000; ++spins) {
    ssize_t n = fi_cq_read(node.cq, &entry, 1);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      REQUIRE(fi_cq_readerr(node.cq, &err, 0) == 1);
      return err;
    }
    REQUIRE(n == -FI_EAGAIN);
    fi_cq_read(other.cq, nullptr, 0);
  }
  REQUIRE(!"no error completion");
  return {};
}

// One success on `node`'s queue, progressing `other`; an error fails the child, with its text.
void* waitSuccessWith(Node& node, Node& other, int line) {
  fi_cq_tagged_entry entry{};
  for (int spins = 0; spins < 50000000; ++spins) {
    ssize_t n = fi_cq_read(node.cq, &entry, 1);
    if (n == 1) return entry.op_context;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(node.cq, &err, 0);
      std::fprintf(stderr, "line %d: error completion %d (%s), prov_errno %d, context %p\n", line,
                   err.err, fi_strerror(err.err), err.prov_errno, err.op_context);
      _exit(1);
    }
    REQUIRE(n == -FI_EAGAIN);
    fi_cq_read(other.cq, nullptr, 0);
  }
  REQUIRE(!"completion timed out");
  return nullptr;
}
#define WAIT_SUCCESS(node, other) waitSuccessWith(node, other, __LINE__)

void expectLinkError(Node& node, const fi_cq_err_entry& err, void* context, bool reached) {
  if (err.op_context != context || err.err != (reached ? FI_ECONNABORTED : FI_EHOSTUNREACH))
    std::fprintf(stderr, "error %d prov_errno %d context %p, expected %s for %p\n", err.err,
                 err.prov_errno, err.op_context, reached ? "reached" : "unreached", context);
  REQUIRE(err.op_context == context);
  REQUIRE(err.err == (reached ? FI_ECONNABORTED : FI_EHOSTUNREACH));
  REQUIRE(err.prov_errno == (reached ? kEstablishedRecvUnresp : kUnreachRemote));
  REQUIRE(std::strstr(fi_cq_strerror(node.cq, err.prov_errno, nullptr, nullptr, 0),
                      "efa-rules: link down") != nullptr);
}

// NIC 1 goes down after 3 operations posted on it and comes back after 3 more on any NIC. While
// it is down, a write it posts fails (ECONNABORTED: it reached that peer before), a send to its
// endpoint from NIC 0 fails (EHOSTUNREACH: NIC 0 never reached it), and an inject fails with a
// NULL context and its immediate data, as EFA reports them; nothing lands. Then it carries data
// again.
TEST_P(EfaRules, LinkGoesDownAfterOperationsAndComesBack) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    linkEnv(GetParam(), {{"NNF_EFA_RULES_FAIL_AFTER_OPS", "1:3:3"}});
    Node nic0, nic1;
    openNicPair(nic0, nic1);
    fi_addr_t to0 = nic1.insert(nic0);
    fi_addr_t to1 = nic0.insert(nic1);
    std::vector<unsigned char> src(4096), dst(4096, 0), in(64, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
    fid_mr* srcMr = nic1.reg(src.data(), src.size(), FI_WRITE | FI_SEND);
    fid_mr* dstMr = nic0.reg(dst.data(), dst.size(), FI_REMOTE_WRITE);
    fid_mr* src0Mr = nic0.reg(src.data(), src.size(), FI_SEND);  // NIC 0 sends from src too
    fid_mr* inMr = nic1.reg(in.data(), in.size(), FI_RECV);
    auto dstAddr = reinterpret_cast<uintptr_t>(dst.data());
    fi_context2 ctx{};
    for (int i = 0; i < 3; ++i) {
      REQUIRE(downMask(nic1) == 0);
      REQUIRE(POST_WITH(nic1, nic0,
                        fi_writedata(nic1.ep, src.data(), 1024, fi_mr_desc(srcMr), i, to0, dstAddr,
                                     fi_mr_key(dstMr), &ctx)) == 0);
      REQUIRE(WAIT_SUCCESS(nic1, nic0) == &ctx);
      fi_cq_tagged_entry landed{};
      nic0.waitOne(&landed);
      REQUIRE((landed.flags & FI_REMOTE_CQ_DATA) && landed.data == static_cast<uint64_t>(i));
    }
    // The schedule moves at the check of the next post: the three that counted all landed.
    REQUIRE(downMask(nic1) == 0);
    std::memset(dst.data(), 0, dst.size());
    REQUIRE(fi_writedata(nic1.ep, src.data(), 4096, fi_mr_desc(srcMr), 9, to0, dstAddr,
                         fi_mr_key(dstMr), &ctx) == 0);
    expectLinkError(nic1, nic1.waitError(), &ctx, true);
    REQUIRE(downMask(nic1) == 2);  // NIC 1 only
    // The target NIC is down: a first send to it finds nobody who ever answered.
    REQUIRE(POST(nic0, fi_tsend(nic0.ep, src.data(), 64, fi_mr_desc(src0Mr), to1, 5, &ctx)) == 0);
    expectLinkError(nic0, nic0.waitError(), &ctx, false);
    // An inject has no context: EFA's error entry carries none, with the immediate data.
    REQUIRE(fi_inject_writedata(nic1.ep, src.data(), 16, 0x1234, to0, dstAddr, fi_mr_key(dstMr)) ==
            0);
    fi_cq_err_entry err = nic1.waitError();
    expectLinkError(nic1, err, nullptr, true);
    REQUIRE(err.data == 0x1234);
    REQUIRE((err.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE));
    REQUIRE(failedByLinks(nic1) == 3);
    // Three operations since it went down: back up at the next post's check, and it carries
    // data again.
    REQUIRE(downMask(nic1) == 2);
    for (size_t i = 0; i < dst.size(); ++i) REQUIRE(dst[i] == 0);  // nothing landed
    REQUIRE(POST_WITH(nic1, nic0,
                      fi_writedata(nic1.ep, src.data(), 4096, fi_mr_desc(srcMr), 10, to0, dstAddr,
                                   fi_mr_key(dstMr), &ctx)) == 0);
    REQUIRE(WAIT_SUCCESS(nic1, nic0) == &ctx);
    REQUIRE(downMask(nic1) == 0);
    fi_cq_tagged_entry landed{};
    nic0.waitOne(&landed);
    REQUIRE(landed.data == 10);
    REQUIRE(std::memcmp(dst.data(), src.data(), dst.size()) == 0);
    fi_context2 recvCtx{};
    REQUIRE(POST(nic1, fi_trecv(nic1.ep, in.data(), in.size(), fi_mr_desc(inMr), FI_ADDR_UNSPEC, 5,
                                0, &recvCtx)) == 0);
    REQUIRE(POST_WITH(nic0, nic1,
                      fi_tsend(nic0.ep, src.data(), 64, fi_mr_desc(src0Mr), to1, 5, &ctx)) == 0);
    REQUIRE(WAIT_SUCCESS(nic0, nic1) == &ctx);
    REQUIRE(WAIT_SUCCESS(nic1, nic0) == &recvCtx);
    REQUIRE(std::memcmp(in.data(), src.data(), 64) == 0);
    REQUIRE(failedByLinks(nic1) == 3);
    REQUIRE(readReport().empty());
    fi_close(&inMr->fid);
    fi_close(&src0Mr->fid);
    fi_close(&dstMr->fid);
    fi_close(&srcMr->fid);
    nic1.close();
    nic0.close();
  }));
}

// A write the base took before the link went down and whose completion is read while it is
// down fails at its initiator, while its bytes may have landed and the target counts it (an
// acknowledgement lost on the way): the case a sender that writes again must not count twice.
// The control file takes the link down and up at the test's chosen points.
TEST_P(EfaRules, AWriteInFlightWhenTheLinkGoesDownFailsThoughItMayLand) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    std::string control = controlPath();
    unlink(control.c_str());
    linkEnv(GetParam(), {{"NNF_EFA_RULES_FAIL_FILE", control}});
    Node nic0, nic1;
    openNicPair(nic0, nic1);
    fi_addr_t to0 = nic1.insert(nic0);
    std::vector<unsigned char> src(8192, 0x5a), dst(8192, 0);
    fid_mr* srcMr = nic1.reg(src.data(), src.size(), FI_WRITE);
    fid_mr* dstMr = nic0.reg(dst.data(), dst.size(), FI_REMOTE_WRITE);
    auto dstAddr = reinterpret_cast<uintptr_t>(dst.data());
    fi_context2 ctx{};
    // The peer's handshake first, so that the write below is posted at once.
    REQUIRE(POST_WITH(nic1, nic0,
                      fi_writedata(nic1.ep, src.data(), 8, fi_mr_desc(srcMr), 1, to0, dstAddr,
                                   fi_mr_key(dstMr), &ctx)) == 0);
    REQUIRE(WAIT_SUCCESS(nic1, nic0) == &ctx);
    nic0.waitOne();
    REQUIRE(fi_writedata(nic1.ep, src.data(), src.size(), fi_mr_desc(srcMr), 2, to0, dstAddr,
                         fi_mr_key(dstMr), &ctx) == 0);
    writeControl(control, "1\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // read at most every 1 ms
    REQUIRE(downMask(nic1) == 2);
    expectLinkError(nic1, waitErrorWith(nic1, nic0), &ctx, true);
    // The bytes went out before the link did: the target completes the write.
    fi_cq_tagged_entry landed{};
    nic0.waitOne(&landed);
    REQUIRE(landed.data == 2);
    for (unsigned char c : dst) REQUIRE(c == 0x5a);
    writeControl(control, "");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(downMask(nic1) == 0);
    REQUIRE(POST_WITH(nic1, nic0,
                      fi_writedata(nic1.ep, src.data(), 64, fi_mr_desc(srcMr), 3, to0, dstAddr,
                                   fi_mr_key(dstMr), &ctx)) == 0);
    REQUIRE(WAIT_SUCCESS(nic1, nic0) == &ctx);
    nic0.waitOne(&landed);
    REQUIRE(landed.data == 3);
    REQUIRE(failedByLinks(nic1) == 1);
    unlink(control.c_str());
    fi_close(&dstMr->fid);
    fi_close(&srcMr->fid);
    nic1.close();
    nic0.close();
  }));
}

// The link is down in the target's process only (its own control file names NIC 0): the
// initiator, which has no control of its own, reads the target's published state and fails
// what it addresses to that NIC, and nothing reaches the target; its NIC 1 is up.
TEST_P(EfaRules, APeersDownLinkFailsWhatIsAddressedToIt) {
  EXPECT_TRUE(runChildren(2, [&](int me, int fd) {
    std::string control = controlPath();  // the child's own
    if (me == 0) {
      writeControl(control, "0");
      linkEnv(GetParam(), {{"NNF_EFA_RULES_FAIL_FILE", control}});
    } else {
      linkEnv(GetParam(), {});
    }
    Node nic0, nic1;
    openNicPair(nic0, nic1);
    nic0.exchange(fd);
    nic1.exchange(fd);
    std::vector<unsigned char> buf(4096, me == 0 ? 0 : 0x3c);
    fid_mr* mr0 = nic0.reg(buf.data(), buf.size(), FI_WRITE | FI_REMOTE_WRITE);
    fid_mr* mr1 = nic1.reg(buf.data(), buf.size(), FI_WRITE | FI_REMOTE_WRITE);
    if (me == 0) {
      REQUIRE(downMask(nic0) == 1);
      uint64_t target[3] = {reinterpret_cast<uintptr_t>(buf.data()), fi_mr_key(mr0),
                            fi_mr_key(mr1)};
      sendAll(fd, target, sizeof(target));
      char step = 0;
      recvAll(fd, &step, 1);  // the write to NIC 0 failed at the initiator
      for (int i = 0; i < 1000; ++i) {
        fi_cq_tagged_entry entry{};
        REQUIRE(fi_cq_read(nic0.cq, &entry, 1) == -FI_EAGAIN);
      }
      for (unsigned char c : buf) REQUIRE(c == 0);
      fi_cq_tagged_entry landed{};
      nic1.waitOne(&landed);  // the write on NIC 1 came
      REQUIRE(landed.data == 7);
      for (unsigned char c : buf) REQUIRE(c == 0x3c);
      recvAll(fd, &step, 1);
    } else {
      uint64_t target[3];
      recvAll(fd, target, sizeof(target));
      fi_context2 ctx{};
      REQUIRE(POST(nic0, fi_writedata(nic0.ep, buf.data(), buf.size(), fi_mr_desc(mr0), 6,
                                      nic0.peer, target[0], target[1], &ctx)) == 0);
      expectLinkError(nic0, nic0.waitError(), &ctx, false);
      REQUIRE(downMask(nic0) == 0);  // ours is up: the peer's is down
      REQUIRE(failedByLinks(nic0) == 1);
      char step = 1;
      sendAll(fd, &step, 1);
      REQUIRE(POST(nic1, fi_writedata(nic1.ep, buf.data(), buf.size(), fi_mr_desc(mr1), 7,
                                      nic1.peer, target[0], target[2], &ctx)) == 0);
      REQUIRE(nic1.waitOne() == &ctx);
      sendAll(fd, &step, 1);
    }
    REQUIRE(readReport().empty());
    unlink(control.c_str());
    fi_close(&mr1->fid);
    fi_close(&mr0->fid);
    nic1.close();
    nic0.close();
  }));
}

// NIC 1 goes down 500 ms after its first operation and comes back 500 ms later. Only the order
// of events matters: each sleep is at least as long as the test says, so a slow machine only
// moves the posts further past each transition.
TEST_P(EfaRules, LinkGoesDownAfterMillisecondsAndComesBack) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    linkEnv(GetParam(), {{"NNF_EFA_RULES_FAIL_AFTER_MS", "1:500:500"}});
    Node nic0, nic1;
    openNicPair(nic0, nic1);
    fi_addr_t to0 = nic1.insert(nic0);
    std::vector<unsigned char> src(256, 1), dst(256, 0);
    fid_mr* srcMr = nic1.reg(src.data(), src.size(), FI_WRITE);
    fid_mr* dstMr = nic0.reg(dst.data(), dst.size(), FI_REMOTE_WRITE);
    auto dstAddr = reinterpret_cast<uintptr_t>(dst.data());
    fi_context2 ctx{};
    auto write = [&](uint64_t data) {
      return POST_WITH(nic1, nic0,
                       fi_writedata(nic1.ep, src.data(), src.size(), fi_mr_desc(srcMr), data, to0,
                                    dstAddr, fi_mr_key(dstMr), &ctx));
    };
    REQUIRE(write(1) == 0);  // starts NIC 1's clock
    REQUIRE(WAIT_SUCCESS(nic1, nic0) == &ctx);
    nic0.waitOne();
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    REQUIRE(write(2) == 0);
    expectLinkError(nic1, nic1.waitError(), &ctx, true);
    REQUIRE(downMask(nic1) == 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    REQUIRE(downMask(nic1) == 0);
    REQUIRE(write(3) == 0);
    REQUIRE(WAIT_SUCCESS(nic1, nic0) == &ctx);
    fi_cq_tagged_entry landed{};
    nic0.waitOne(&landed);
    REQUIRE(landed.data == 3);
    REQUIRE(failedByLinks(nic1) == 1);
    fi_close(&dstMr->fid);
    fi_close(&srcMr->fid);
    nic1.close();
    nic0.close();
  }));
}

// A silent link ("s1" in the control file): a write posted on it is taken and neither lands nor
// completes until its initiator removes the target's address (then nothing of it ever comes) or
// SRD's retries run out (then it fails as on a down link); the address inserted again works once
// the link is mended. What the plugin's silence watch must
// find and take back (docs/failover.md).
TEST_P(EfaRules, ASilentLinkSwallowsWritesUntilTheirPeerIsRemoved) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    std::string control = controlPath();
    unlink(control.c_str());
    linkEnv(GetParam(),
            {{"NNF_EFA_RULES_FAIL_FILE", control}, {"NNF_EFA_RULES_SILENT_GIVE_UP_MS", "3000"}});
    Node nic0, nic1;
    openNicPair(nic0, nic1);
    fi_addr_t to0 = nic1.insert(nic0);
    std::vector<unsigned char> src(4096, 0x5a), dst(4096, 0);
    fid_mr* srcMr = nic1.reg(src.data(), src.size(), FI_WRITE);
    fid_mr* dstMr = nic0.reg(dst.data(), dst.size(), FI_REMOTE_WRITE);
    auto dstAddr = reinterpret_cast<uintptr_t>(dst.data());
    fi_context2 ctx{};
    REQUIRE(POST_WITH(nic1, nic0,
                      fi_writedata(nic1.ep, src.data(), 8, fi_mr_desc(srcMr), 1, to0, dstAddr,
                                   fi_mr_key(dstMr), &ctx)) == 0);
    REQUIRE(WAIT_SUCCESS(nic1, nic0) == &ctx);
    nic0.waitOne();
    std::memset(dst.data(), 0, dst.size());
    writeControl(control, "s1\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // read at most every 1 ms
    REQUIRE(downMask(nic1) == 0);                               // silent is not down
    REQUIRE(fi_writedata(nic1.ep, src.data(), src.size(), fi_mr_desc(srcMr), 2, to0, dstAddr,
                         fi_mr_key(dstMr), &ctx) == 0);
    fi_cq_tagged_entry entry{};
    for (int i = 0; i < 20000; ++i) {
      REQUIRE(fi_cq_read(nic1.cq, &entry, 1) == -FI_EAGAIN);
      REQUIRE(fi_cq_read(nic0.cq, &entry, 1) == -FI_EAGAIN);
    }
    for (unsigned char c : dst) REQUIRE(c == 0);  // nothing landed
    REQUIRE(counter(nic1, kOptLinkWithheld) == 1);
    REQUIRE(failedByLinks(nic1) == 0);
    REQUIRE(fi_av_remove(nic1.av, &to0, 1, 0) == 0);
    REQUIRE(counter(nic1, kOptLinkForgotten) == 1);
    // Another, whose peer is not removed: it fails once SRD's retries ran out (3 s here; the
    // first write's 40,000 reads above take far less), as on a down link, and nothing of it
    // landed.
    to0 = nic1.insert(nic0);
    auto posted = std::chrono::steady_clock::now();
    REQUIRE(fi_writedata(nic1.ep, src.data(), src.size(), fi_mr_desc(srcMr), 4, to0, dstAddr,
                         fi_mr_key(dstMr), &ctx) == 0);
    fi_cq_err_entry err{};
    for (;;) {
      ssize_t n = fi_cq_read(nic1.cq, &entry, 1);
      if (n == -FI_EAVAIL) {
        REQUIRE(fi_cq_readerr(nic1.cq, &err, 0) == 1);
        break;
      }
      REQUIRE(n == -FI_EAGAIN);
      REQUIRE(fi_cq_read(nic0.cq, &entry, 1) == -FI_EAGAIN);
      REQUIRE(std::chrono::steady_clock::now() - posted < std::chrono::seconds(30));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    expectLinkError(nic1, err, &ctx, true);
    REQUIRE(std::chrono::steady_clock::now() - posted >= std::chrono::milliseconds(3000));
    for (unsigned char c : dst) REQUIRE(c == 0);
    REQUIRE(counter(nic1, kOptLinkWithheld) == 2);
    writeControl(control, "");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    to0 = nic1.insert(nic0);
    REQUIRE(POST_WITH(nic1, nic0,
                      fi_writedata(nic1.ep, src.data(), 64, fi_mr_desc(srcMr), 3, to0, dstAddr,
                                   fi_mr_key(dstMr), &ctx)) == 0);
    REQUIRE(WAIT_SUCCESS(nic1, nic0) == &ctx);
    fi_cq_tagged_entry landed{};
    nic0.waitOne(&landed);
    REQUIRE(landed.data == 3);
    REQUIRE(std::memcmp(dst.data(), src.data(), 64) == 0);
    unlink(control.c_str());
    fi_close(&dstMr->fid);
    fi_close(&srcMr->fid);
    nic1.close();
    nic0.close();
  }));
}

}  // namespace
