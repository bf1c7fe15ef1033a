// Links of the software EFA device that go down in the middle of a run and come back
// (link.cc): after K operations for K2 more (NNF_SOFT_EFA_FAIL_AFTER_OPS), after T ms for T2 ms
// (NNF_SOFT_EFA_FAIL_AFTER_MS), while a control file names the NIC (NNF_SOFT_EFA_FAIL_FILE). A
// down NIC is down for every process of the namespace (they share it); its operations, and
// those addressed to it, complete with SRD's "unresponsive remote" (13) or, toward a device
// never reached, "unreachable remote" (15), and land nothing.
#include <chrono>
#include <cstdio>
#include <thread>

#include "test_node.h"

namespace nnf::softefa::test {
namespace {

constexpr uint32_t kUnresponsiveRemote = 13;
constexpr uint32_t kUnreachableRemote = 15;
constexpr size_t kPiece = 4096;

// An RDMA write of `from`'s bytes at `offset` to the same offset of `to`'s buffer.
int writeAt(Node& from, ibv_ah* ah, const Address& to, uint64_t id, size_t offset) {
  return post(from, ah, to, id,
              [&](ibv_qp_ex* qp) { ibv_wr_rdma_write(qp, to.rkey, to.addr + offset); },
              {sgeOf(from, offset, kPiece)});
}

struct Addresses {
  Address nic0;
  Address nic1;
};

// NIC 1 goes down once 2 operations were posted on it (by process b, whose schedule it is) and
// comes back once 2 more were posted: a write on it fails as unresponsive (it answered before),
// a write from process a, which shares the NIC, fails as unreachable, and so does one from NIC 0
// to it; none of them lands, and both NICs carry writes again after.
TEST(SoftEfaLinks, ALinkGoesDownAfterOperationsAndComesBack) {
  setenv("NNF_SOFT_EFA_NICS", "2", 1);
  TwoProcesses::run(
      testNamespace(),
      [](int in, int out) {
        Node t0, t1;
        ASSERT_NO_FATAL_FAILURE(t0.open(0, 8 * kPiece));
        ASSERT_NO_FATAL_FAILURE(t1.open(1, 8 * kPiece));
        sendValue(out, Addresses{t0.address(), t1.address()});
        Address peer = receiveValue<Address>(in);  // b's NIC 1
        receiveValue<int>(in);                     // b saw NIC 1 go down
        ASSERT_EQ(writeAt(t1, t1.ah(peer), peer, 7, 0), 0);
        Completion c = poll(t1);
        EXPECT_NE(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.vendorErr, kUnreachableRemote);  // this process never reached b's NIC 1
        sendValue(out, 1);
        receiveValue<int>(in);  // b is done
        EXPECT_TRUE(matches(t1.buffer.data(), 2 * kPiece, 1));
        for (size_t i = 2 * kPiece; i < 4 * kPiece; ++i) ASSERT_EQ(t1.buffer[i], 0) << i;
        EXPECT_TRUE(matches(t1.buffer.data() + 4 * kPiece, kPiece,
                            static_cast<uint8_t>(1 + 4 * kPiece * 7)));
        EXPECT_TRUE(matches(t1.buffer.data() + 5 * kPiece, kPiece,
                            static_cast<uint8_t>(1 + 5 * kPiece * 7)));
      },
      [](int in, int out) {
        setenv("NNF_SOFT_EFA_FAIL_AFTER_OPS", "1:2:2", 1);
        Node s0, s1;
        ASSERT_NO_FATAL_FAILURE(s0.open(0, 8 * kPiece));
        ASSERT_NO_FATAL_FAILURE(s1.open(1, 8 * kPiece));
        fill(s0.buffer.data(), s0.buffer.size(), 1);
        fill(s1.buffer.data(), s1.buffer.size(), 1);
        Addresses peer = receiveValue<Addresses>(in);
        sendValue(out, s1.address());
        ibv_ah* to1 = s1.ah(peer.nic1);
        ibv_ah* from0 = s0.ah(peer.nic1);
        for (uint64_t i = 0; i < 2; ++i) {
          ASSERT_EQ(writeAt(s1, to1, peer.nic1, i, i * kPiece), 0);
          Completion c = poll(s1);
          EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        }
        ASSERT_EQ(writeAt(s1, to1, peer.nic1, 2, 2 * kPiece), 0);
        Completion c = poll(s1);
        EXPECT_NE(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.vendorErr, kUnresponsiveRemote);
        EXPECT_EQ(c.wrId, 2u);
        sendValue(out, 1);
        receiveValue<int>(in);  // a's write on the shared NIC failed too
        ASSERT_EQ(writeAt(s0, from0, peer.nic1, 3, 3 * kPiece), 0);
        c = poll(s0);
        EXPECT_EQ(c.vendorErr, kUnreachableRemote);  // NIC 0 never reached a's NIC 1
        // Two operations since it went down: NIC 1 is up again for both.
        ASSERT_EQ(writeAt(s1, to1, peer.nic1, 4, 4 * kPiece), 0);
        c = poll(s1);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        ASSERT_EQ(writeAt(s0, from0, peer.nic1, 5, 5 * kPiece), 0);
        c = poll(s0);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        sendValue(out, 1);
      });
}

// A send waiting for its receive (SRD retries for ever) when the control file takes its NIC's
// link down fails then, as unresponsive; the file emptied, the NIC carries data again.
TEST(SoftEfaLinks, AnOperationUnderWayFailsWhenTheControlFileTakesItsLinkDown) {
  std::string control = "/tmp/soft-efa-links-" + std::to_string(getpid());
  std::remove(control.c_str());
  setenv("NNF_SOFT_EFA_FAIL_FILE", control.c_str(), 1);
  auto writeControl = [control](const char* text) {
    std::string temp = control + ".new";
    FILE* file = std::fopen(temp.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs(text, file);
    ASSERT_EQ(std::fclose(file), 0);
    ASSERT_EQ(std::rename(temp.c_str(), control.c_str()), 0);
  };
  TwoProcesses::run(
      testNamespace(),
      [](int in, int out) {
        Node target;
        ASSERT_NO_FATAL_FAILURE(target.open(0, 4 * kPiece));
        sendValue(out, target.address());
        receiveValue<int>(in);  // the sender is done; no receive was ever posted
        EXPECT_TRUE(matches(target.buffer.data(), kPiece, 3));
        for (size_t i = kPiece; i < 2 * kPiece; ++i) ASSERT_EQ(target.buffer[i], 0) << i;
        EXPECT_TRUE(matches(target.buffer.data() + 2 * kPiece, kPiece,
                            static_cast<uint8_t>(3 + 2 * kPiece * 7)));
      },
      [&](int in, int out) {
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, 4 * kPiece));
        fill(node.buffer.data(), node.buffer.size(), 3);
        Address peer = receiveValue<Address>(in);
        ibv_ah* ah = node.ah(peer);
        ASSERT_EQ(writeAt(node, ah, peer, 1, 0), 0);
        Completion c = poll(node);
        ASSERT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        // No receive is posted at the target: the send waits, retried.
        ASSERT_EQ(post(node, ah, peer, 2, ibv_wr_send, {sgeOf(node, kPiece, kPiece)}), 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ASSERT_NO_FATAL_FAILURE(writeControl("0\n"));
        c = poll(node);
        EXPECT_EQ(c.wrId, 2u);
        EXPECT_EQ(c.vendorErr, kUnresponsiveRemote);
        ASSERT_NO_FATAL_FAILURE(writeControl(""));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // read at most every 1 ms
        ASSERT_EQ(writeAt(node, ah, peer, 3, 2 * kPiece), 0);
        c = poll(node);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        sendValue(out, 1);
      });
  std::remove(control.c_str());
  unsetenv("NNF_SOFT_EFA_FAIL_FILE");
}

// A process that saw NIC 0's link down ends without seeing it come back (a test's peer exits
// so): its vote is dropped when the next process opens a device, and NIC 0 carries data for it.
TEST(SoftEfaLinks, TheVoteOfAProcessThatEndedKeepsNoLinkDown) {
  std::string control = "/tmp/soft-efa-votes-" + std::to_string(getpid());
  FILE* file = std::fopen(control.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs("0\n", file);
  ASSERT_EQ(std::fclose(file), 0);
  auto writeOnce = [](uint64_t id, bool expectSuccess) {
    return [id, expectSuccess](int in, int out) {
      Node node;
      ASSERT_NO_FATAL_FAILURE(node.open(0, 4 * kPiece));
      Address peer = receiveValue<Address>(in);
      ASSERT_EQ(writeAt(node, node.ah(peer), peer, id, 0), 0);
      Completion c = poll(node);
      if (expectSuccess) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
      } else {
        EXPECT_EQ(c.vendorErr, kUnreachableRemote);
      }
      sendValue(out, 1);
    };
  };
  auto target = [](int in, int out) {
    Node node;
    ASSERT_NO_FATAL_FAILURE(node.open(0, 4 * kPiece));
    sendValue(out, node.address());
    receiveValue<int>(in);
  };
  setenv("NNF_SOFT_EFA_FAIL_FILE", control.c_str(), 1);
  TwoProcesses::run(testNamespace(), target, writeOnce(1, false), /*keep=*/true);
  unsetenv("NNF_SOFT_EFA_FAIL_FILE");
  std::remove(control.c_str());
  TwoProcesses::run(testNamespace(), target, writeOnce(2, true));
}

// NIC 0 goes down 400 ms after its first operation and comes back 400 ms later. Only the order
// of events matters: each sleep is at least as long as the test asks, so a slow machine only
// moves the writes further past each transition.
TEST(SoftEfaLinks, ALinkGoesDownAfterMillisecondsAndComesBack) {
  TwoProcesses::run(
      testNamespace(),
      [](int in, int out) {
        Node target;
        ASSERT_NO_FATAL_FAILURE(target.open(0, 4 * kPiece));
        sendValue(out, target.address());
        receiveValue<int>(in);
      },
      [](int in, int out) {
        setenv("NNF_SOFT_EFA_FAIL_AFTER_MS", "0:400:400", 1);
        Node node;
        ASSERT_NO_FATAL_FAILURE(node.open(0, 4 * kPiece));
        Address peer = receiveValue<Address>(in);
        ibv_ah* ah = node.ah(peer);
        ASSERT_EQ(writeAt(node, ah, peer, 1, 0), 0);  // starts the clock
        Completion c = poll(node);
        ASSERT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ASSERT_EQ(writeAt(node, ah, peer, 2, kPiece), 0);
        c = poll(node);
        EXPECT_EQ(c.vendorErr, kUnresponsiveRemote);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ASSERT_EQ(writeAt(node, ah, peer, 3, 2 * kPiece), 0);
        c = poll(node);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << c.vendorErr;
        sendValue(out, 1);
      });
}

}  // namespace
}  // namespace nnf::softefa::test
