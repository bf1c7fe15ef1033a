// Tests of the EFA-rules provider through raw libfabric: its attributes, data movement over tcp
// and shm, out-of-order completions, and one test per rule (efa_rules_nics_test.cc: several NICs;
// efa_rules_strict_test.cc: what the real provider does beyond the rules). Each scenario runs in
// forked children (test_node.h).
#include "test_node.h"

namespace {

using namespace efa_rules_test;

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
      REQUIRE(entry->domain_attr->cq_data_size == 4);  // EFA's 32-bit immediate
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
    const bool risky =
        *proto == '\0' || std::strcmp(proto, "LL128") == 0 || std::strcmp(proto, "^LL") == 0;
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
    EXPECT_TRUE(runChildren(1,
                            [&](int, int) {
                              childEnv(GetParam());
                              if (*accept != '\0')
                                setenv("NNF_EFA_RULES_SENDRECV_ORDER", accept, 1);
                              Node node;
                              Options setup;
                              setup.cleanOptions = false;
                              node.open(setup);
                              REQUIRE(node.setBool(kOptSendrecv128, true) ==
                                      (*accept != '\0' ? 0 : -FI_EOPNOTSUPP));
                              REQUIRE(node.setBool(kOptWrite128, true) == 0);
                              node.close();
                            }))
        << "NNF_EFA_RULES_SENDRECV_ORDER=" << accept;
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

INSTANTIATE_TEST_SUITE_P(Base, EfaRules, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
