// What the software EFA device refuses, as SRD does: a send nobody posted a receive for
// (receiver-not-ready after rnr_retry tries, or waiting for ever with 7), the documented limits
// (RDMA size, message size, SGE counts), keys of another PD or no longer registered, a peer that
// died; and that it reorders.
#include "test_node.h"

namespace nnf::softefa::test {
namespace {

// rnr_retry 3: the send fails with receiver-not-ready (EFA status 10); rnr_retry 7 (SRD's
// default): it waits until the receive is posted.
TEST(SoftEfaErrors, ReceiverNotReadyFailsAfterRnrRetryTriesOrWaits) {
  TwoProcesses::run(
      testNamespace(),
      [](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, 4096));
        sendValue(out, node.address());
        receiveValue<int>(in);  // the first send failed; the second is posted
        node.postRecv(1, 0, 64);
        Completion c = poll(node);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.byteLen, 16u);
      },
      [](int in, int out) {
        Node impatient, patient;
        ASSERT_NO_FATAL_FAILURE(impatient.open(0, 4096, /*rnrRetry=*/3));
        ASSERT_NO_FATAL_FAILURE(patient.open(0, 4096, /*rnrRetry=*/7));
        Address peer = receiveValue<Address>(in);
        ibv_ah* ah = impatient.ah(peer);
        ASSERT_EQ(post(impatient, ah, peer, 1, ibv_wr_send, {sgeOf(impatient, 0, 16)}), 0);
        Completion c = poll(impatient);
        EXPECT_EQ(c.status, IBV_WC_RNR_RETRY_EXC_ERR);
        EXPECT_EQ(c.vendorErr, 10u);
        ibv_ah* ah2 = patient.ah(peer);
        ASSERT_EQ(post(patient, ah2, peer, 2, ibv_wr_send, {sgeOf(patient, 0, 16)}), 0);
        sendValue(out, 1);
        c = poll(patient);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
      });
}

// The limits: an RDMA larger than max_rdma_size and a send larger than the MTU complete with a
// length error; more SGEs than the queue takes are refused when posted; keys of another PD, of
// nothing registered any more, or beyond their region complete with a protection or remote
// access error.
TEST(SoftEfaErrors, LimitsAndForeignKeysAreErrors) {
  constexpr uint32_t kMaxRdma = 65536;
  setenv("NNF_SOFT_EFA_MAX_RDMA_SIZE", std::to_string(kMaxRdma).c_str(), 1);
  TwoProcesses::run(
      testNamespace(),
      [](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, 1 << 20));
        ibv_pd* other = ibv_alloc_pd(node.ctx);
        std::vector<uint8_t> spare(4096);
        ibv_mr* foreign = ibv_reg_mr(other, spare.data(), spare.size(),
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        ASSERT_NE(foreign, nullptr);
        ibv_mr* gone = ibv_reg_mr(node.pd, spare.data(), spare.size(),
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        Address address = node.address();
        uint32_t keys[2] = {foreign->rkey, gone->rkey};
        ASSERT_EQ(ibv_dereg_mr(gone), 0);
        sendValue(out, address);
        sendValue(out, keys);
        receiveValue<int>(in);
      },
      [](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, 1 << 20));
        Address peer = receiveValue<Address>(in);
        auto keys = receiveValue<std::array<uint32_t, 2>>(in);
        ibv_ah* ah = node.ah(peer);
        auto write = [&](uint32_t rkey, uint64_t addr) {
          return [rkey, addr](ibv_qp_ex* qp) { ibv_wr_rdma_write(qp, rkey, addr); };
        };
        auto expectError = [&](int id, ibv_wc_status status, uint32_t vendor) {
          Completion c = poll(node);
          EXPECT_EQ(c.wrId, static_cast<uint64_t>(id));
          EXPECT_EQ(c.status, status) << "operation " << id;
          EXPECT_EQ(c.vendorErr, vendor) << "operation " << id;
        };
        ASSERT_EQ(
            post(node, ah, peer, 1, write(peer.rkey, peer.addr), {sgeOf(node, 0, kMaxRdma + 1)}),
            0);
        expectError(1, IBV_WC_LOC_LEN_ERR, 6);
        ASSERT_EQ(post(node, ah, peer, 2, ibv_wr_send, {sgeOf(node, 0, 8929)}), 0);
        expectError(2, IBV_WC_LOC_LEN_ERR, 6);
        EXPECT_EQ(post(node, ah, peer, 3, ibv_wr_send,
                       {sgeOf(node, 0, 8), sgeOf(node, 8, 8), sgeOf(node, 16, 8)}),
                  EINVAL);
        EXPECT_EQ(post(node, ah, peer, 4, write(peer.rkey, peer.addr),
                       {sgeOf(node, 0, 8), sgeOf(node, 8, 8)}),
                  EINVAL);
        ASSERT_EQ(post(node, ah, peer, 5, write(keys[0], peer.addr), {sgeOf(node, 0, 8)}), 0);
        expectError(5, IBV_WC_REM_ACCESS_ERR, 7);
        ASSERT_EQ(post(node, ah, peer, 6, write(keys[1], peer.addr), {sgeOf(node, 0, 8)}), 0);
        expectError(6, IBV_WC_REM_ACCESS_ERR, 7);
        ASSERT_EQ(post(node, ah, peer, 7, write(peer.rkey, peer.addr + (1 << 20) - 4),
                       {sgeOf(node, 0, 8)}),
                  0);
        expectError(7, IBV_WC_REM_ACCESS_ERR, 7);
        // A local key of another PD than the queue pair's.
        ibv_pd* other = ibv_alloc_pd(node.ctx);
        std::vector<uint8_t> spare(64);
        ibv_mr* foreign = ibv_reg_mr(other, spare.data(), spare.size(), IBV_ACCESS_LOCAL_WRITE);
        ibv_sge sge = {reinterpret_cast<uint64_t>(spare.data()), 64, foreign->lkey};
        ASSERT_EQ(post(node, ah, peer, 8, write(peer.rkey, peer.addr), {sge}), 0);
        expectError(8, IBV_WC_LOC_PROT_ERR, 5);
        sendValue(out, 1);
      });
  unsetenv("NNF_SOFT_EFA_MAX_RDMA_SIZE");
}

// Messages posted together do not take the target's receives in posting order (SRD delivers out
// of order): some message lands in a receive posted for another.
TEST(SoftEfaErrors, MessagesArriveOutOfOrder) {
  constexpr int kMessages = 64;
  TwoProcesses::run(
      testNamespace(),
      [](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, kMessages * 64));
        for (int i = 0; i < kMessages; ++i) node.postRecv(i, i * 64, 64);
        sendValue(out, node.address());
        int displaced = 0;
        std::vector<bool> seen(kMessages, false);
        for (int i = 0; i < kMessages; ++i) {
          Completion c = poll(node);
          ASSERT_EQ(c.status, IBV_WC_SUCCESS);
          uint32_t message = 0;
          memcpy(&message, node.buffer.data() + c.wrId * 64, sizeof(message));
          ASSERT_LT(message, static_cast<uint32_t>(kMessages));
          EXPECT_FALSE(seen[message]);
          seen[message] = true;
          if (message != c.wrId) ++displaced;
        }
        EXPECT_GT(displaced, 0) << "every message took the receive posted in its order";
      },
      [](int in, int) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, kMessages * 64));
        Address peer = receiveValue<Address>(in);
        ibv_ah* ah = node.ah(peer);
        ibv_wr_start(node.qpx);
        for (uint32_t i = 0; i < kMessages; ++i) {
          memcpy(node.buffer.data() + i * 64, &i, sizeof(i));
          node.qpx->wr_id = i;
          node.qpx->wr_flags = IBV_SEND_SIGNALED;
          ibv_wr_send(node.qpx);
          ibv_wr_set_sge(node.qpx, node.mr->lkey,
                         reinterpret_cast<uint64_t>(node.buffer.data()) + i * 64, sizeof(i));
          ibv_wr_set_ud_addr(node.qpx, ah, peer.qpn, peer.qkey);
        }
        ASSERT_EQ(ibv_wr_complete(node.qpx), 0);
        for (int i = 0; i < kMessages; ++i) EXPECT_EQ(poll(node).status, IBV_WC_SUCCESS);
      });
}

// A peer whose process died has no queue pair any more (the kernel destroys them): sends to it
// (a receive posted or not) and writes into its memory fail with a bad destination QP (EFA
// status 9, which libfabric's efa provider expects then), never hang.
TEST(SoftEfaErrors, DeadPeersQueuePairIsGone) {
  TwoProcesses::run(
      testNamespace(),
      [](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, 4096));
        node.postRecv(1, 0, 64);
        sendValue(out, node.address());
        _exit(0);  // no clean-up: as if killed
      },
      [](int in, int) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, 4096));
        Address peer = receiveValue<Address>(in);
        char eof;
        EXPECT_EQ(read(in, &eof, 1), 0);  // the peer has exited
        // A killed process stays a zombie until reaped; either way it answers nothing.
        ibv_ah* ah = node.ah(peer);
        for (int id = 1; id <= 2; ++id) {
          ASSERT_EQ(post(node, ah, peer, id, ibv_wr_send, {sgeOf(node, 0, 16)}), 0);
          Completion c = poll(node);
          EXPECT_EQ(c.status, IBV_WC_REM_INV_RD_REQ_ERR) << "send " << id;
          EXPECT_EQ(c.vendorErr, 9u) << "send " << id;
        }
        ASSERT_EQ(post(node, ah, peer, 3,
                       [&](ibv_qp_ex* qp) { ibv_wr_rdma_write(qp, peer.rkey, peer.addr); },
                       {sgeOf(node, 0, 16)}),
                  0);
        EXPECT_EQ(poll(node).vendorErr, 9u);
      });
}

}  // namespace
}  // namespace nnf::softefa::test
