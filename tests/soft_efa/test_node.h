// What the software EFA device's tests share: one end of an SRD connection (Node), polling, two
// processes joined by pipes, data patterns.
#pragma once

#include <ftw.h>
#include <glob.h>
#include <infiniband/efadv.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/processes.h"

namespace nnf::softefa::test {

struct Address {
  ibv_gid gid;
  uint32_t qpn;
  uint32_t qkey;
  uint64_t addr;  // a registered buffer and its key, for RDMA
  uint32_t rkey;
};

// One end: a device, PD, CQ, SRD queue pair in RTS, a registered buffer.
struct Node {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq_ex* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_qp_ex* qpx = nullptr;
  std::vector<uint8_t> buffer;
  ibv_mr* mr = nullptr;
  uint32_t qkey = 0;

  void open(int device, size_t bytes, uint8_t rnrRetry = 7, bool unsolicited = true) {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    ASSERT_NE(list, nullptr);
    ASSERT_GT(count, device);
    ctx = ibv_open_device(list[device]);
    ibv_free_device_list(list);
    ASSERT_NE(ctx, nullptr);
    pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    ibv_cq_init_attr_ex cqAttr = {};
    cqAttr.cqe = 1024;
    cqAttr.wc_flags = IBV_WC_STANDARD_FLAGS;
    efadv_cq_init_attr dvCq = {};
    dvCq.wc_flags = EFADV_WC_EX_WITH_SGID | EFADV_WC_EX_WITH_IS_UNSOLICITED;
    cq = efadv_create_cq(ctx, &cqAttr, &dvCq, sizeof(dvCq));
    ASSERT_NE(cq, nullptr) << strerror(errno);
    ibv_qp_init_attr_ex attr = {};
    attr.qp_type = IBV_QPT_DRIVER;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                          IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_RDMA_WRITE |
                          IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    attr.pd = pd;
    attr.send_cq = ibv_cq_ex_to_cq(cq);
    attr.recv_cq = ibv_cq_ex_to_cq(cq);
    attr.cap = {256, 256, 2, 1, 32};
    attr.sq_sig_all = 1;
    efadv_qp_init_attr dvQp = {};
    dvQp.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;
    if (unsolicited) dvQp.flags = EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV;
    qp = efadv_create_qp_ex(ctx, &attr, &dvQp, sizeof(dvQp));
    ASSERT_NE(qp, nullptr) << strerror(errno);
    qpx = ibv_qp_to_qp_ex(qp);
    qkey = 0x1234 + static_cast<uint32_t>(getpid());
    ibv_qp_attr mod = {};
    mod.qp_state = IBV_QPS_INIT;
    mod.port_num = 1;
    mod.qkey = qkey;
    ASSERT_EQ(ibv_modify_qp(qp, &mod, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
              0);
    mod.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(qp, &mod, IBV_QP_STATE), 0);
    mod.qp_state = IBV_QPS_RTS;
    mod.rnr_retry = rnrRetry;
    ASSERT_EQ(ibv_modify_qp(qp, &mod, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY), 0);
    buffer.assign(bytes, 0);
    mr = ibv_reg_mr(pd, buffer.data(), buffer.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr, nullptr) << strerror(errno);
  }

  Address address() const {
    Address out = {};
    EXPECT_EQ(ibv_query_gid(ctx, 1, 0, &out.gid), 0);
    out.qpn = qp->qp_num;
    out.qkey = qkey;
    out.addr = reinterpret_cast<uint64_t>(buffer.data());
    out.rkey = mr->rkey;
    return out;
  }

  ibv_ah* ah(const Address& peer) {
    ibv_ah_attr attr = {};
    attr.is_global = 1;
    attr.port_num = 1;
    attr.grh.dgid = peer.gid;
    return ibv_create_ah(pd, &attr);
  }

  void postRecv(uint64_t id, size_t offset, uint32_t length) {
    ibv_sge sge = {reinterpret_cast<uint64_t>(buffer.data() + offset), length, mr->lkey};
    ibv_recv_wr wr = {};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
  }
};

struct Completion {
  uint64_t wrId;
  ibv_wc_status status;
  uint32_t vendorErr;
  ibv_wc_opcode opcode;
  uint32_t byteLen;
  uint32_t imm;
  bool hasImm;
  uint32_t srcQp;
  uint32_t slid;
  bool unsolicited;
  bool sgidKnown;
  ibv_gid sgid;
};

// The next completion; fails the test when none comes within 30 s (a hang guard, not a bound
// on how fast the device is).
inline Completion poll(Node& node) {
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  ibv_poll_cq_attr attr = {};
  for (;;) {
    int rc = ibv_start_poll(node.cq, &attr);
    if (rc == 0) break;
    EXPECT_EQ(rc, ENOENT);
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 30) {
      ADD_FAILURE() << "no completion within 30 s";
      return {};
    }
  }
  Completion c = {};
  ibv_cq_ex* cq = node.cq;
  c.wrId = cq->wr_id;
  c.status = cq->status;
  c.vendorErr = ibv_wc_read_vendor_err(cq);
  c.opcode = ibv_wc_read_opcode(cq);
  c.byteLen = ibv_wc_read_byte_len(cq);
  c.hasImm = ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM;
  if (c.hasImm) c.imm = ibv_wc_read_imm_data(cq);
  c.srcQp = ibv_wc_read_src_qp(cq);
  c.slid = ibv_wc_read_slid(cq);
  efadv_cq* dv = efadv_cq_from_ibv_cq_ex(cq);
  c.unsolicited = efadv_wc_is_unsolicited(dv);
  c.sgidKnown = efadv_wc_read_sgid(dv, &c.sgid) == 0;
  ibv_end_poll(cq);
  return c;
}

// Two processes joined by pipes: `a` and `b` each get the other's address. Forked by the tests'
// one harness (support/processes.h): a failure, crash or hang of either fails the test.
// `keep`: the namespace stays for the next run (else it is removed with the processes).
class TwoProcesses {
 public:
  using Role = std::function<void(int in, int out)>;
  static void run(const std::string& ns, Role a, Role b, bool keep = false) {
    int ab[2], ba[2];
    ASSERT_EQ(pipe(ab), 0);
    ASSERT_EQ(pipe(ba), 0);
    nnf::test::ProcessOptions options;
    options.timeoutSec = 120;
    options.whileRunning = [&](const std::vector<pid_t>&) {
      close(ab[0]);
      close(ab[1]);
      close(ba[0]);
      close(ba[1]);
    };
    auto first = [&] { return child(ns, a, ba[0], ab[1], {ab[0], ba[1]}); };
    auto second = [&] { return child(ns, b, ab[0], ba[1], {ba[0], ab[1]}); };
    nnf::test::runProcesses({{"process a", first}, {"process b", second}}, options);
    if (!keep) removeNamespace(ns);
  }

  // The processes exit without destroying what they made: the namespace's shared files and
  // sysfs tree go with the test.
  static void removeNamespace(const std::string& ns) {
    glob_t found = {};
    std::string pattern = "/dev/shm/nnf-soft-efa-" + ns + "-*";
    if (glob(pattern.c_str(), 0, nullptr, &found) == 0)
      for (size_t i = 0; i < found.gl_pathc; ++i) unlink(found.gl_pathv[i]);
    globfree(&found);
    std::string tree = "/tmp/nnf-soft-efa-" + ns;
    nftw(
        tree.c_str(),
        [](const char* path, const struct stat*, int, struct FTW*) { return remove(path); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }

 private:
  static int child(const std::string& ns, const Role& role, int in, int out,
                   std::initializer_list<int> others) {
    // Only its own ends stay open, so that a peer's exit reads as end of file.
    for (int fd : others) close(fd);
    setenv("NNF_SOFT_EFA_NS", ns.c_str(), 1);
    role(in, out);
    return ::testing::Test::HasFailure() ? 1 : 0;
  }
};

template <typename T>
inline void sendValue(int fd, const T& value) {
  ASSERT_EQ(write(fd, &value, sizeof(value)), static_cast<ssize_t>(sizeof(value)));
}

template <typename T>
inline T receiveValue(int fd) {
  T value{};
  EXPECT_EQ(read(fd, &value, sizeof(value)), static_cast<ssize_t>(sizeof(value)));
  return value;
}

inline std::string testNamespace() {
  return std::string("t") + std::to_string(getpid()) + "-" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

inline void fill(uint8_t* data, size_t size, uint8_t seed) {
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>(seed + i * 7);
}

inline bool matches(const uint8_t* data, size_t size, uint8_t seed) {
  for (size_t i = 0; i < size; ++i)
    if (data[i] != static_cast<uint8_t>(seed + i * 7)) return false;
  return true;
}

// Posts one operation; returns wr_complete's answer.
inline int post(Node& node, ibv_ah* ah, const Address& peer, uint64_t id,
                const std::function<void(ibv_qp_ex*)>& op, std::vector<ibv_sge> sges) {
  ibv_wr_start(node.qpx);
  node.qpx->wr_id = id;
  node.qpx->wr_flags = IBV_SEND_SIGNALED;
  op(node.qpx);
  ibv_wr_set_sge_list(node.qpx, sges.size(), sges.data());
  ibv_wr_set_ud_addr(node.qpx, ah, peer.qpn, peer.qkey);
  return ibv_wr_complete(node.qpx);
}

inline ibv_sge sgeOf(Node& node, size_t offset, uint32_t length) {
  return {reinterpret_cast<uint64_t>(node.buffer.data() + offset), length, node.mr->lkey};
}

}  // namespace nnf::softefa::test
