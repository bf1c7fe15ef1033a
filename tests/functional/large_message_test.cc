// A message of 1.5 GiB through the plugin on the real efa provider (softefa), every byte
// checked: EFA cuts an RMA write at min(1 GiB, max_rdma_size) and the target sees one completion
// per piece, each with the same immediate data (issue 24, defect 4). Elsewhere it skips: the
// stand-in does not cut writes, and moving 3 GiB through tcp would only cost CI time.
#include <sys/mman.h>

#include <cstring>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/known_failures.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x6c;
constexpr size_t kSize = size_t{3} << 29;  // 1.5 GiB: more than EFA's largest RMA

TEST(LargeMessage, OneAndAHalfGiBLandsWhole) {
  if (!onSoftEfa()) GTEST_SKIP() << "only the real efa provider cuts large writes";
  NNF_SKIP_KNOWN_FAILURE();
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kSize);
    fillPattern(buffer.data(), kSize, 15);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), kSize, &mh));
    void* request;
    ASSERT_NO_FATAL_FAILURE(
        postSend(peer, comm, buffer.data(), static_cast<int>(kSize), kTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_TRUE(peer.channel->wait(120));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kSize);
    std::memset(buffer.data(), 0, kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), kSize, &mh));
    void* request;
    ASSERT_NO_FATAL_FAILURE(
        postRecv(peer, comm, buffer.data(), static_cast<int>(kSize), kTag, mh, &request));
    int size = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
    EXPECT_EQ(size, static_cast<int>(kSize)) << "the receive completed with part of the message";
    EXPECT_TRUE(verifyPattern(buffer.data(), kSize, 15));
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 240);
}

}  // namespace
}  // namespace nnf::test
