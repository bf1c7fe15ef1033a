// The software EFA device through the verbs API, between two forked processes: its devices,
// send/receive, RDMA write with immediate data, RDMA read (soft_efa_errors_test.cc: what it
// refuses). Each test runs its processes in a namespace of its own.
#include "test_node.h"

namespace nnf::softefa::test {
namespace {

TEST(SoftEfa, DevicesLookLikeAP5sEfaNics) {
  TwoProcesses::run(
      testNamespace(),
      [](int, int) {
        setenv("NNF_SOFT_EFA_NICS", "2", 1);
        int count = 0;
        ibv_device** list = ibv_get_device_list(&count);
        ASSERT_EQ(count, 2);
        EXPECT_STREQ(ibv_get_device_name(list[0]), "rdmap79s0");
        EXPECT_STREQ(ibv_get_device_name(list[1]), "rdmap80s0");
        char resolved[PATH_MAX];
        std::string link = std::string(list[0]->ibdev_path) + "/device";
        ASSERT_NE(realpath(link.c_str(), resolved), nullptr) << link;
        EXPECT_NE(std::string(resolved).find("0000:4f:00.0"), std::string::npos) << resolved;
        link += "/driver";
        ASSERT_NE(realpath(link.c_str(), resolved), nullptr) << link;
        EXPECT_EQ(std::string(resolved).substr(std::string(resolved).rfind('/')), "/efa");
        ibv_context* ctx = ibv_open_device(list[0]);
        ibv_free_device_list(list);
        ASSERT_NE(ctx, nullptr);
        ibv_device_attr attr;
        ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
        EXPECT_EQ(attr.vendor_id, 0x1d0fu);
        EXPECT_EQ(attr.vendor_part_id, 0xefa1u);
        efadv_device_attr dv = {};
        ASSERT_EQ(efadv_query_device(ctx, &dv, sizeof(dv)), 0);
        uint32_t caps = EFADV_DEVICE_ATTR_CAPS_RDMA_READ | EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE |
                        EFADV_DEVICE_ATTR_CAPS_RNR_RETRY | EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID |
                        EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV;
        EXPECT_EQ(dv.device_caps & caps, caps);
        EXPECT_EQ(dv.max_rdma_size, 1u << 30);
        EXPECT_EQ(dv.max_sq_sge, 2);
        EXPECT_GT(dv.inline_buf_size, 0);
        ibv_port_attr port;
        ASSERT_EQ(ibv_query_port(ctx, 1, &port), 0);
        EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
        EXPECT_GT(port.max_msg_sz, 8000u);
        EXPECT_STREQ(
            getenv("SYSFS_PATH"),
            std::string("/tmp/nnf-soft-efa-" + std::string(getenv("NNF_SOFT_EFA_NS"))).c_str());
        ibv_close_device(ctx);
      },
      [](int, int) {});
}

// Sends of every size up to the MTU, with and without immediate data, land whole in posted
// receives; the receive completion names the sender (QP, AH once the receiver has one, else its
// GID) and the length.
TEST(SoftEfa, SendsOfEverySizeLandInPostedReceives) {
  const std::vector<uint32_t> sizes = {0, 1, 31, 32, 33, 4096, 8928};
  TwoProcesses::run(
      testNamespace(),
      [&](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, sizes.size() * 9000));
        for (size_t i = 0; i < sizes.size(); ++i) node.postRecv(100 + i, i * 9000, 9000);
        sendValue(out, node.address());
        Address peer = receiveValue<Address>(in);
        // Receives are taken in posting order by whichever message the device carries first: each
        // message is known by its length.
        std::vector<bool> seen(sizes.size(), false);
        for (size_t n = 0; n < sizes.size(); ++n) {
          Completion c = poll(node);
          ASSERT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
          ASSERT_EQ(c.opcode, IBV_WC_RECV);
          ASSERT_GE(c.wrId, 100u);
          size_t slot = c.wrId - 100;
          ASSERT_LT(slot, sizes.size());
          size_t i = std::find(sizes.begin(), sizes.end(), c.byteLen) - sizes.begin();
          ASSERT_LT(i, sizes.size()) << c.byteLen;
          EXPECT_FALSE(seen[i]);
          seen[i] = true;
          EXPECT_TRUE(matches(node.buffer.data() + slot * 9000, sizes[i], static_cast<uint8_t>(i)));
          EXPECT_EQ(c.srcQp, peer.qpn);
          EXPECT_EQ(c.slid, 0xffffu) << "no AH for the sender here yet";
          ASSERT_TRUE(c.sgidKnown);
          EXPECT_EQ(memcmp(c.sgid.raw, peer.gid.raw, 16), 0);
          EXPECT_FALSE(c.unsolicited);
        }
        // With an AH for the sender, completions carry its number instead of the GID.
        ibv_ah* ah = node.ah(peer);
        efadv_ah_attr ahAttr = {};
        ASSERT_EQ(efadv_query_ah(ah, &ahAttr, sizeof(ahAttr)), 0);
        node.postRecv(7, 0, 64);
        sendValue(out, 1);
        Completion c = poll(node);
        ASSERT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_TRUE(c.hasImm);
        EXPECT_EQ(c.imm, 0xabcdef01u);
        EXPECT_EQ(c.byteLen, 8u);
        EXPECT_EQ(c.slid, ahAttr.ahn);
        EXPECT_FALSE(c.sgidKnown);
      },
      [&](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, sizes.size() * 9000));
        Address peer = receiveValue<Address>(in);
        sendValue(out, node.address());
        ibv_ah* ah = node.ah(peer);
        ASSERT_NE(ah, nullptr);
        for (size_t i = 0; i < sizes.size(); ++i) {
          fill(node.buffer.data() + i * 9000, sizes[i], static_cast<uint8_t>(i));
          ASSERT_EQ(post(node, ah, peer, i, ibv_wr_send, {sgeOf(node, i * 9000, sizes[i])}), 0);
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
          Completion c = poll(node);
          EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
          EXPECT_EQ(c.opcode, IBV_WC_SEND);
          EXPECT_EQ(c.byteLen, 0u) << "send completions carry no length";
        }
        receiveValue<int>(in);
        ASSERT_EQ(post(node, ah, peer, 9, [](ibv_qp_ex* qp) { ibv_wr_send_imm(qp, 0xabcdef01u); },
                       {sgeOf(node, 0, 8)}),
                  0);
        EXPECT_EQ(poll(node).status, IBV_WC_SUCCESS);
      });
}

// A write with immediate data lands in registered memory without a receive (the queue pair was
// created for unsolicited write receive); the target sees one completion, the length written
// and the immediate value; the target's CPU did nothing for the bytes.
void writeWithImmediate(bool unsolicited) {
  constexpr size_t kSize = 3 << 20;
  TwoProcesses::run(
      testNamespace(),
      [&](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, kSize, 7, unsolicited));
        if (!unsolicited) node.postRecv(55, 0, 0);
        sendValue(out, node.address());
        receiveValue<Address>(in);
        Completion c = poll(node);
        ASSERT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        EXPECT_EQ(c.byteLen, kSize);
        EXPECT_TRUE(c.hasImm);
        EXPECT_EQ(c.imm, 0x5eed0001u);
        EXPECT_EQ(c.unsolicited, unsolicited);
        EXPECT_EQ(c.wrId, unsolicited ? 0u : 55u);
        EXPECT_TRUE(matches(node.buffer.data(), kSize, 3));
      },
      [&](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, kSize));
        Address peer = receiveValue<Address>(in);
        sendValue(out, node.address());
        ibv_ah* ah = node.ah(peer);
        fill(node.buffer.data(), kSize, 3);
        ASSERT_EQ(post(node, ah, peer, 1,
                       [&](ibv_qp_ex* qp) {
                         ibv_wr_rdma_write_imm(qp, peer.rkey, peer.addr, 0x5eed0001u);
                       },
                       {sgeOf(node, 0, kSize)}),
                  0);
        Completion c = poll(node);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        EXPECT_EQ(c.opcode, IBV_WC_RDMA_WRITE);
      });
}

TEST(SoftEfa, WriteWithImmediateNeedsNoReceiveWhereUnsolicited) {
  writeWithImmediate(true);
}

TEST(SoftEfa, WriteWithImmediateTakesAReceiveOtherwise) {
  writeWithImmediate(false);
}

// A read fetches the target's registered memory (reported, as rdma-core's efa does, with the
// SEND opcode).
TEST(SoftEfa, ReadFetchesRemoteMemory) {
  constexpr size_t kSize = 1 << 20;
  TwoProcesses::run(
      testNamespace(),
      [&](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, kSize));
        fill(node.buffer.data(), kSize, 9);
        sendValue(out, node.address());
        receiveValue<int>(in);  // the reader is done
      },
      [&](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, kSize));
        Address peer = receiveValue<Address>(in);
        ibv_ah* ah = node.ah(peer);
        ASSERT_EQ(post(node, ah, peer, 4,
                       [&](ibv_qp_ex* qp) { ibv_wr_rdma_read(qp, peer.rkey, peer.addr); },
                       {sgeOf(node, 0, kSize)}),
                  0);
        Completion c = poll(node);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        EXPECT_EQ(c.opcode, IBV_WC_SEND);
        EXPECT_EQ(c.wrId, 4u);
        EXPECT_TRUE(matches(node.buffer.data(), kSize, 9));
        sendValue(out, 1);
      });
}

}  // namespace
}  // namespace nnf::softefa::test
