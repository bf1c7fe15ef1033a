// Tests of what the EFA-rules provider does because the real efa provider does it, beyond a
// reading of EFA's rules (docs/efa.md, "EFA's rules in CI"): the 4-byte immediate and the target's
// completion of a write with data, writes EFA emulates (and their memory-type rule), failed
// remote writes, errors among successes, and -FI_EAGAIN before a peer's handshake.
#include "test_node.h"

namespace {

using namespace efa_rules_test;

constexpr int kRuleMixedHmemIov = 11;
constexpr int kRuleCqDataSize = 12;
constexpr int kRuleRmaSize = 13;
constexpr int kRemoteWriteErrno = 0xefa0fe;
constexpr uint64_t kRemoteWriteFlags = FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE;
constexpr int kOptEmulatedWrite = kOptEfaBase + 2;

// Registers `buf` as CUDA memory of GPU `gpu` (the fake driver calls it so too).
fid_mr* regGpu(Node& node, void* buf, size_t len, uint64_t access, int gpu) {
  declareDevice(buf, len, gpu);
  iovec iov{buf, len};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  attr.iface = FI_HMEM_CUDA;
  attr.device.cuda = gpu;
  fid_mr* mr = nullptr;
  REQUIRE(fi_mr_regattr(node.domain, &attr, 0, &mr) == 0);
  return mr;
}

// Reads every completion until `successes` good ones and `errors` error entries came.
void collect(Node& node, size_t successes, size_t errors, std::vector<fi_cq_tagged_entry>* good,
             std::vector<fi_cq_err_entry>* bad) {
  for (long spins = 0; good->size() < successes || bad->size() < errors; ++spins) {
    REQUIRE(spins < 50000000);
    fi_cq_tagged_entry entry{};
    ssize_t n = fi_cq_read(node.cq, &entry, 1);
    if (n == 1) {
      good->push_back(entry);
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      REQUIRE(fi_cq_readerr(node.cq, &err, 0) == 1);
      bad->push_back(err);
    } else {
      REQUIRE(n == -FI_EAGAIN);
    }
  }
  REQUIRE(good->size() == successes && bad->size() == errors);
}

// EFA's immediate is 32 bits: more is a violation, whatever carries it (a write or a message,
// with or without a completion of its own).
TEST_P(EfaRules, ImmediateDataAboveThirtyTwoBitsIsRefused) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Node node;
    node.open(Options{});
    node.enable();
    std::vector<char> buf(64);
    fid_mr* mr = node.reg(buf.data(), buf.size(), FI_WRITE | FI_REMOTE_WRITE | FI_SEND);
    uint64_t target = reinterpret_cast<uintptr_t>(buf.data());
    fi_context2 ctx{};
    REQUIRE(POST(node, fi_writedata(node.ep, buf.data(), 8, fi_mr_desc(mr), 1ULL << 32, node.self,
                                    target, fi_mr_key(mr), &ctx)) == 0);
    expectViolation(node, node.waitError(), &ctx, kRuleCqDataSize, "cq-data-size");
    REQUIRE(POST(node, fi_tsenddata(node.ep, buf.data(), 8, fi_mr_desc(mr), 0x100000000ULL,
                                    node.self, 1, &ctx)) == 0);
    REQUIRE(node.waitError().prov_errno == kProvErrnoBase + kRuleCqDataSize);
    REQUIRE(POST(node, fi_inject_writedata(node.ep, buf.data(), 8, ~0ULL, node.self, target,
                                           fi_mr_key(mr))) == -FI_EINVAL);
    REQUIRE(node.violations() == 3);
    fi_close(&mr->fid);
    node.close();
  }));
}

// A write with immediate data longer than EFA's largest device write (1 GiB) is a violation:
// EFA would cut it and complete each piece at the target with the same immediate. Refused before
// anything moves, so a short buffer serves.
TEST_P(EfaRules, WriteWithDataOverOneGiBIsRefused) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Node node;
    node.open(Options{});
    node.enable();
    std::vector<char> buf(64);
    fid_mr* mr = node.reg(buf.data(), buf.size(), FI_WRITE | FI_REMOTE_WRITE);
    uint64_t target = reinterpret_cast<uintptr_t>(buf.data());
    fi_context2 ctx{};
    REQUIRE(POST(node, fi_writedata(node.ep, buf.data(), (size_t{1} << 30) + 1, fi_mr_desc(mr), 5,
                                    node.self, target, fi_mr_key(mr), &ctx)) == 0);
    expectViolation(node, node.waitError(), &ctx, kRuleRmaSize, "rma-size");
    REQUIRE(node.violations() == 1);
    fi_close(&mr->fid);
    node.close();
  }));
}

// The target's completion of a write with data, as EFA makes it: no context, EFA's flags, the
// bytes written as its length (tcp in libfabric 1.17 says 0) and the 32-bit immediate alone, for
// a one-iov write, a two-iov one and an empty one.
TEST_P(EfaRules, RemoteWriteCompletesAsOnEfa) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Node node;
    node.open(Options{});
    node.enable();
    std::vector<char> src(6000, 's'), dst(6000, 0);
    fid_mr* srcMr = node.reg(src.data(), src.size(), FI_WRITE);
    fid_mr* dstMr = node.reg(dst.data(), dst.size(), FI_REMOTE_WRITE);
    uint64_t target = reinterpret_cast<uintptr_t>(dst.data());
    fi_context2 one{}, two{}, none{};
    REQUIRE(POST(node, fi_writedata(node.ep, src.data(), 5000, fi_mr_desc(srcMr), 0xfeedbeef,
                                    node.self, target, fi_mr_key(dstMr), &one)) == 0);
    iovec iov[2] = {{src.data(), 100}, {src.data() + 1000, 300}};
    void* desc[2] = {fi_mr_desc(srcMr), fi_mr_desc(srcMr)};
    fi_rma_iov rma{target, 400, fi_mr_key(dstMr)};
    fi_msg_rma msg{iov, desc, 2, node.self, &rma, 1, &two, 0x7};
    REQUIRE(POST(node, fi_writemsg(node.ep, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION)) == 0);
    REQUIRE(POST(node, fi_writedata(node.ep, nullptr, 0, nullptr, 0x8, node.self, target,
                                    fi_mr_key(dstMr), &none)) == 0);
    std::vector<fi_cq_tagged_entry> good;
    std::vector<fi_cq_err_entry> bad;
    collect(node, 6, 0, &good, &bad);
    std::map<uint64_t, size_t> lengthOf;  // immediate -> len, at the target
    std::set<void*> initiator;
    for (const fi_cq_tagged_entry& entry : good) {
      if (entry.op_context != nullptr) {
        REQUIRE((entry.flags & FI_REMOTE_CQ_DATA) == 0);
        initiator.insert(entry.op_context);
        continue;
      }
      REQUIRE(entry.flags == kRemoteWriteFlags);
      REQUIRE(entry.buf == nullptr);
      REQUIRE(lengthOf.emplace(entry.data, entry.len).second);
    }
    REQUIRE(initiator == (std::set<void*>{&one, &two, &none}));
    REQUIRE(lengthOf == (std::map<uint64_t, size_t>{{0xfeedbeef, 5000}, {0x7, 400}, {0x8, 0}}));
    REQUIRE(node.violations() == 0);
    fi_close(&dstMr->fid);
    fi_close(&srcMr->fid);
    node.close();
  }));
}

// A write with data of two iovs is emulated, its payload copied as desc[0]'s memory type: a host
// header before a GPU body (the plugin's eager path), or bodies of two GPUs, are violations; the
// same without data (a device write takes an SGE list, each with its own key) and an all-GPU
// write with data are not.
TEST_P(EfaRules, MultiIovWriteWithDataMixingMemoryTypesIsReported) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Node node;
    node.open(Options{});
    node.enable();
    std::vector<char> host(4096), gpu0(4096), gpu1(4096), dst(16384);
    fid_mr* hostMr = node.reg(host.data(), host.size(), FI_WRITE);
    fid_mr* gpu0Mr = regGpu(node, gpu0.data(), gpu0.size(), FI_WRITE, 0);
    fid_mr* gpu1Mr = regGpu(node, gpu1.data(), gpu1.size(), FI_WRITE, 1);
    fid_mr* dstMr = node.reg(dst.data(), dst.size(), FI_REMOTE_WRITE);
    fi_rma_iov rma{reinterpret_cast<uintptr_t>(dst.data()), 2048, fi_mr_key(dstMr)};
    auto write = [&](char* first, fid_mr* firstMr, char* second, fid_mr* secondMr, uint64_t flags,
                     fi_context2* ctx) {
      iovec iov[2] = {{first, 1024}, {second, 1024}};
      void* desc[2] = {fi_mr_desc(firstMr), fi_mr_desc(secondMr)};
      fi_msg_rma msg{iov, desc, 2, node.self, &rma, 1, ctx, 0x11};
      return POST(node, fi_writemsg(node.ep, &msg, flags | FI_COMPLETION));
    };
    fi_context2 ctx{};
    REQUIRE(write(host.data(), hostMr, gpu0.data(), gpu0Mr, FI_REMOTE_CQ_DATA, &ctx) == 0);
    expectViolation(node, node.waitError(), &ctx, kRuleMixedHmemIov, "mixed-hmem-iov");
    REQUIRE(readReport().find("the provider would copy device memory with the CPU") !=
            std::string::npos);
    REQUIRE(write(gpu0.data(), gpu0Mr, gpu1.data(), gpu1Mr, FI_REMOTE_CQ_DATA, &ctx) == 0);
    REQUIRE(node.waitError().prov_errno == kProvErrnoBase + kRuleMixedHmemIov);
    REQUIRE(write(gpu0.data(), gpu0Mr, host.data(), hostMr, FI_REMOTE_CQ_DATA, &ctx) == 0);
    REQUIRE(node.waitError().prov_errno == kProvErrnoBase + kRuleMixedHmemIov);
    REQUIRE(node.violations() == 3);
    // Kept: no data (a device write), and one GPU's memory throughout.
    fi_context2 plain{}, sameGpu{};
    REQUIRE(write(host.data(), hostMr, gpu0.data(), gpu0Mr, 0, &plain) == 0);
    REQUIRE(write(gpu0.data(), gpu0Mr, gpu0.data() + 2048, gpu0Mr, FI_REMOTE_CQ_DATA, &sameGpu) ==
            0);
    std::vector<fi_cq_tagged_entry> good;
    std::vector<fi_cq_err_entry> bad;
    collect(node, 3, 0, &good, &bad);  // the two writes and the target's completion
    REQUIRE(node.violations() == 3);
    for (fid_mr* mr : {dstMr, gpu1Mr, gpu0Mr, hostMr}) fi_close(&mr->fid);
    node.close();
  }));
}

// Writes EFA emulates for other reasons follow the same rule for any iov count: to peers of
// NNF_EFA_RULES_EMULATE_PEER (nic:N, all) while FI_OPT_EFA_EMULATED_WRITE still says false, and
// every write where the device has no RDMA write (NNF_EFA_RULES_EMULATED_WRITE=1). Writes to the
// endpoint itself are never emulated for a peer's sake.
TEST_P(EfaRules, WritesToEmulatedPeersFollowTheMemoryTypeRule) {
  struct Case {
    const char* emulatePeer;
    const char* emulatedWrite;
    bool toPeer0, toPeer1, toSelf;  // violation expected
  };
  const Case cases[] = {{"nic:1", "0", false, true, false},
                        {"all", "0", true, true, false},
                        {"", "1", true, true, true},
                        {"", "0", false, false, false}};
  for (const Case& c : cases) {
    EXPECT_TRUE(runChildren(
        1,
        [&](int, int) {
          childEnv(GetParam());
          setenv("NNF_EFA_RULES_NICS", "2", 1);
          setenv("NNF_EFA_RULES_EMULATE_PEER", c.emulatePeer, 1);
          setenv("NNF_EFA_RULES_EMULATED_WRITE", c.emulatedWrite, 1);
          Options second;
          second.nic = 1;
          Node a, peer0, peer1;  // a and peer0 on NIC 0, peer1 on NIC 1
          a.open(Options{});
          peer0.open(Options{});
          peer1.open(second);
          for (Node* node : {&a, &peer0, &peer1}) node->enable();
          bool emulated = true;
          size_t len = sizeof(emulated);
          REQUIRE(fi_getopt(&a.ep->fid, FI_OPT_ENDPOINT, kOptEmulatedWrite, &emulated, &len) == 0);
          REQUIRE(emulated == (std::strcmp(c.emulatedWrite, "1") == 0));
          std::vector<char> host(4096), gpu(4096), dst0(4096), dst1(4096), dstSelf(4096);
          fid_mr* hostMr = a.reg(host.data(), host.size(), FI_WRITE);
          fid_mr* gpuMr = regGpu(a, gpu.data(), gpu.size(), FI_WRITE, 0);
          fid_mr* mr0 = peer0.reg(dst0.data(), dst0.size(), FI_REMOTE_WRITE);
          fid_mr* mr1 = peer1.reg(dst1.data(), dst1.size(), FI_REMOTE_WRITE);
          fid_mr* mrSelf = a.reg(dstSelf.data(), dstSelf.size(), FI_REMOTE_WRITE);
          // Host then GPU, no immediate data: a device write unless the write is emulated.
          auto check = [&](Node& to, fi_addr_t addr, std::vector<char>& dst, fid_mr* dstMr,
                           bool violation) {
            iovec iov[2] = {{host.data(), 512}, {gpu.data(), 512}};
            void* desc[2] = {fi_mr_desc(hostMr), fi_mr_desc(gpuMr)};
            fi_rma_iov rma{reinterpret_cast<uintptr_t>(dst.data()), 1024, fi_mr_key(dstMr)};
            fi_context2 ctx{};
            fi_msg_rma msg{iov, desc, 2, addr, &rma, 1, &ctx, 0};
            uint64_t before = a.violations();
            REQUIRE(POST_WITH(a, to, fi_writemsg(a.ep, &msg, FI_COMPLETION)) == 0);
            if (violation) {
              REQUIRE(a.waitError().prov_errno == kProvErrnoBase + kRuleMixedHmemIov);
              REQUIRE(a.violations() == before + 1);
            } else {
              fi_cq_tagged_entry entry{};
              for (long spins = 0; fi_cq_read(a.cq, &entry, 1) != 1; ++spins) {
                REQUIRE(spins < 50000000);
                fi_cq_read(to.cq, nullptr, 0);
              }
              REQUIRE(entry.op_context == &ctx);
              REQUIRE(a.violations() == before);
            }
          };
          check(peer0, a.insert(peer0), dst0, mr0, c.toPeer0);
          check(peer1, a.insert(peer1), dst1, mr1, c.toPeer1);
          check(a, a.self, dstSelf, mrSelf, c.toSelf);
          for (fid_mr* mr : {mrSelf, mr1, mr0, gpuMr, hostMr}) fi_close(&mr->fid);
          peer1.close();
          peer0.close();
          a.close();
        }))
        << "NNF_EFA_RULES_EMULATE_PEER=" << c.emulatePeer
        << " NNF_EFA_RULES_EMULATED_WRITE=" << c.emulatedWrite;
  }
}

// NNF_EFA_RULES_REMOTE_WRITE_ERRORS=2: every second write with data fails at its target, as an
// unsolicited write receive may: an error entry without context, with EFA's flags and the
// write's immediate data; the initiator's write completes.
TEST_P(EfaRules, RemoteWriteErrorsHaveNoContextAndCarryTheImmediate) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    setenv("NNF_EFA_RULES_REMOTE_WRITE_ERRORS", "2", 1);
    Node node;
    node.open(Options{});
    node.enable();
    std::vector<char> src(256, 'w'), dst(256);
    fid_mr* srcMr = node.reg(src.data(), src.size(), FI_WRITE);
    fid_mr* dstMr = node.reg(dst.data(), dst.size(), FI_REMOTE_WRITE);
    fi_context2 ctx[3];
    for (uint64_t i = 0; i < 3; ++i) {
      REQUIRE(POST(node, fi_writedata(node.ep, src.data(), 64, fi_mr_desc(srcMr), 0xa0 + i,
                                      node.self, reinterpret_cast<uintptr_t>(dst.data()),
                                      fi_mr_key(dstMr), &ctx[i])) == 0);
    }
    std::vector<fi_cq_tagged_entry> good;
    std::vector<fi_cq_err_entry> bad;
    collect(node, 5, 1, &good, &bad);  // three initiator completions, two at the target
    const fi_cq_err_entry& err = bad[0];
    REQUIRE(err.op_context == nullptr);
    REQUIRE(err.flags == kRemoteWriteFlags);
    REQUIRE(err.err == FI_EIO && err.prov_errno == kRemoteWriteErrno);
    REQUIRE(std::strstr(fi_cq_strerror(node.cq, err.prov_errno, nullptr, nullptr, 0),
                        "NNF_EFA_RULES_REMOTE_WRITE_ERRORS"));
    std::set<uint64_t> immediates{err.data};
    size_t initiator = 0;
    for (const fi_cq_tagged_entry& entry : good) {
      if (entry.op_context != nullptr) {
        ++initiator;
        continue;
      }
      REQUIRE(immediates.insert(entry.data).second);
    }
    REQUIRE(initiator == 3);
    REQUIRE(immediates == (std::set<uint64_t>{0xa0, 0xa1, 0xa2}));
    REQUIRE(node.violations() == 0);
    fi_close(&dstMr->fid);
    fi_close(&srcMr->fid);
    node.close();
  }));
}

// An error comes out among successes that were ready before it (default), not only once all of
// them are read (NNF_EFA_RULES_INTERLEAVE_ERRORS=0). Writes held back on NIC 0 complete at the
// initiator at once (held.cc), so that 20 successes wait before the error is made.
TEST_P(EfaRules, ErrorsComeAmongSuccesses) {
  for (const char* interleave : {"1", "0"}) {
    EXPECT_TRUE(runChildren(
        1,
        [&](int, int) {
          childEnv(GetParam());
          setenv("NNF_EFA_RULES_INTERLEAVE_ERRORS", interleave, 1);
          setenv("NNF_EFA_RULES_HOLD_NIC", "0:600000", 1);
          Node node;
          node.open(Options{});
          node.enable();
          constexpr int kWrites = 20;
          std::vector<char> src(64), dst(64);
          fid_mr* srcMr = node.reg(src.data(), src.size(), FI_WRITE);
          fid_mr* dstMr = node.reg(dst.data(), dst.size(), FI_REMOTE_WRITE);
          std::vector<fi_context2> ctx(kWrites + 1);
          for (int i = 0; i < kWrites; ++i) {
            REQUIRE(POST(node, fi_writedata(node.ep, src.data(), 8, fi_mr_desc(srcMr), i, node.self,
                                            reinterpret_cast<uintptr_t>(dst.data()),
                                            fi_mr_key(dstMr), &ctx[i])) == 0);
          }
          // No descriptor: a missing-descriptor error completion.
          REQUIRE(POST(node, fi_tsend(node.ep, src.data(), 8, nullptr, node.self, 1,
                                      &ctx[kWrites])) == 0);
          std::vector<fi_cq_tagged_entry> good;
          std::vector<fi_cq_err_entry> bad;
          size_t successesBeforeError = 0;
          for (long spins = 0; good.size() < kWrites || bad.empty(); ++spins) {
            REQUIRE(spins < 50000000);
            fi_cq_tagged_entry entry{};
            ssize_t n = fi_cq_read(node.cq, &entry, 1);
            if (n == 1) {
              good.push_back(entry);
            } else if (n == -FI_EAVAIL) {
              fi_cq_err_entry err{};
              REQUIRE(fi_cq_readerr(node.cq, &err, 0) == 1);
              REQUIRE(err.op_context == &ctx[kWrites]);
              successesBeforeError = good.size();
              bad.push_back(err);
            } else {
              REQUIRE(n == -FI_EAGAIN);
            }
          }
          REQUIRE(bad.size() == 1 && good.size() == kWrites);
          if (*interleave == '1')
            REQUIRE(successesBeforeError < kWrites);
          else
            REQUIRE(successesBeforeError == kWrites);
          fi_close(&dstMr->fid);
          fi_close(&srcMr->fid);
          node.close();
        }))
        << "NNF_EFA_RULES_INTERLEAVE_ERRORS=" << interleave;
  }
}

// The first posts to a new peer answer -FI_EAGAIN (NNF_EFA_RULES_HANDSHAKE_EAGAIN, default 2),
// per endpoint and destination, once; posts to the endpoint itself never do; 0 turns it off.
TEST_P(EfaRules, PostsToANewPeerWaitForItsHandshake) {
  for (const char* eagain : {"", "0", "5"}) {
    EXPECT_TRUE(runChildren(
        1,
        [&](int, int) {
          childEnv(GetParam());
          if (*eagain != '\0') setenv("NNF_EFA_RULES_HANDSHAKE_EAGAIN", eagain, 1);
          const uint64_t expected = *eagain == '\0' ? 2 : std::strtoull(eagain, nullptr, 10);
          Node a, b, c;
          for (Node* node : {&a, &b, &c}) {
            node->open(Options{});
            node->enable();
          }
          fi_addr_t toB = a.insert(b), toC = a.insert(c);
          std::vector<char> buf(64);
          fid_mr* mr = a.reg(buf.data(), buf.size(), FI_SEND | FI_RECV);
          fid_mr* bMr = b.reg(buf.data(), buf.size(), FI_RECV);
          fi_context2 ctx{}, recvCtx{};
          REQUIRE(POST(b, fi_trecv(b.ep, buf.data(), 8, fi_mr_desc(bMr), FI_ADDR_UNSPEC, 1, 0,
                                   &recvCtx)) == 0);
          REQUIRE(POST_WITH(a, b, fi_tsend(a.ep, buf.data(), 8, fi_mr_desc(mr), toB, 1, &ctx)) ==
                  0);
          REQUIRE(a.handshakeEagains() == expected);
          REQUIRE(waitOneWith(a, b) == &ctx);
          REQUIRE(waitOneWith(b, a) == &recvCtx);
          // The handshake is done: that peer waits no more; a tagged inject to another one does.
          REQUIRE(POST_WITH(a, b, fi_tinject(a.ep, buf.data(), 8, toB, 2)) == 0);
          REQUIRE(a.handshakeEagains() == expected);
          REQUIRE(POST_WITH(a, c, fi_tinject(a.ep, buf.data(), 8, toC, 2)) == 0);
          REQUIRE(a.handshakeEagains() == 2 * expected);
          // Ourselves: no handshake.
          fi_context2 selfSend{}, selfRecv{};
          REQUIRE(POST(a, fi_trecv(a.ep, buf.data() + 8, 8, fi_mr_desc(mr), a.self, 3, 0,
                                   &selfRecv)) == 0);
          REQUIRE(POST(a, fi_tsend(a.ep, buf.data(), 8, fi_mr_desc(mr), a.self, 3, &selfSend)) ==
                  0);
          a.waitOne();
          a.waitOne();
          REQUIRE(a.handshakeEagains() == 2 * expected);
          REQUIRE(a.violations() == 0);
          fi_close(&bMr->fid);
          fi_close(&mr->fid);
          c.close();
          b.close();
          a.close();
        }))
        << "NNF_EFA_RULES_HANDSHAKE_EAGAIN=" << eagain;
  }
}

// A message received from a peer is its handshake (where completions name their source,
// FI_SOURCE): the endpoint's first post to that peer goes at once, however many -FI_EAGAIN
// answers the limit would allow.
TEST_P(EfaRules, AMessageFromThePeerCompletesItsHandshake) {
  EXPECT_TRUE(runChildren(1, [&](int, int) {
    childEnv(GetParam());
    Options withSource;
    withSource.source = true;
    Node a, b;
    setenv("NNF_EFA_RULES_HANDSHAKE_EAGAIN", "1000", 1);
    a.open(withSource);
    setenv("NNF_EFA_RULES_HANDSHAKE_EAGAIN", "0", 1);  // b posts freely
    b.open(withSource);
    a.enable();
    b.enable();
    fi_addr_t toB = a.insert(b), toA = b.insert(a);
    std::vector<char> buf(64);
    fid_mr* aMr = a.reg(buf.data(), buf.size(), FI_SEND | FI_RECV);
    fid_mr* bMr = b.reg(buf.data(), buf.size(), FI_SEND | FI_RECV);
    fi_context2 recvCtx{}, sendCtx{};
    REQUIRE(POST(a, fi_trecv(a.ep, buf.data(), 8, fi_mr_desc(aMr), FI_ADDR_UNSPEC, 1, 0,
                             &recvCtx)) == 0);
    REQUIRE(POST_WITH(b, a, fi_tsend(b.ep, buf.data() + 8, 8, fi_mr_desc(bMr), toA, 1, &sendCtx)) ==
            0);
    REQUIRE(waitOneWith(a, b) == &recvCtx);
    REQUIRE(waitOneWith(b, a) == &sendCtx);
    REQUIRE(POST(b, fi_trecv(b.ep, buf.data() + 16, 8, fi_mr_desc(bMr), FI_ADDR_UNSPEC, 2, 0,
                             &recvCtx)) == 0);
    REQUIRE(POST_WITH(a, b, fi_tsend(a.ep, buf.data(), 8, fi_mr_desc(aMr), toB, 2, &sendCtx)) == 0);
    REQUIRE(a.handshakeEagains() == 0);
    REQUIRE(waitOneWith(a, b) == &sendCtx);
    REQUIRE(waitOneWith(b, a) == &recvCtx);
    fi_close(&bMr->fid);
    fi_close(&aMr->fid);
    b.close();
    a.close();
  }));
}

}  // namespace
