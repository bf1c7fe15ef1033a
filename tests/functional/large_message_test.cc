// Messages over 1 GiB through the plugin's rdma protocol on EFA, every byte checked: EFA cuts an
// RMA write at min(1 GiB, max_rdma_size) and the target sees one completion per piece, each with
// the same immediate data (issue 24, defect 4), so segments must stop at 1 GiB. 1.5 GiB through
// NCCL's v8 int sizes, 3 GiB - 1 B through v9's size_t ones (the receive's int size reports
// INT_MAX, as NCCL's v9+ test takes it). On the real efa provider (softefa) and the EFA-rules
// stand-in; elsewhere they skip: moving gigabytes through tcp would only cost CI time.
#include <sys/mman.h>

#include <dlfcn.h>

#include <climits>
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
// Sends `size` bytes from one process to the other, through ncclNetPlugin_v9's isend and irecv
// (size_t sizes) when `sizeT`, else through v8's (int).
void moveWhole(size_t size, bool sizeT) {
  constexpr int kTag = 0x6c;
  auto v9 = [](Peer& peer) {
    return static_cast<const abi::NetV9*>(dlsym(peer.library->handle(), "ncclNetPlugin_v9"));
  };
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size);
    fillPattern(buffer.data(), size, 15);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), size, &mh));
    void* request = nullptr;
    if (sizeT) {
      const abi::NetV9* net = v9(peer);
      ASSERT_NE(net, nullptr) << dlerror();
      // The receive is posted first: an rdma send before its descriptor returns NULL.
      ASSERT_TRUE(peer.channel->wait(120));
      for (int spins = 0; request == nullptr && spins < 1000000; ++spins) {
        ASSERT_EQ(net->isend(comm, buffer.data(), size, kTag, mh, &request), abi::kSuccess);
      }
      ASSERT_NE(request, nullptr) << "isend of " << size << " bytes kept returning NULL";
    } else {
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, comm, buffer.data(), static_cast<int>(size), kTag, mh, &request));
    }
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_TRUE(peer.channel->wait(120));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size);
    std::memset(buffer.data(), 0, size);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), size, &mh));
    void* request = nullptr;
    if (sizeT) {
      const abi::NetV9* net = v9(peer);
      ASSERT_NE(net, nullptr) << dlerror();
      void* data = buffer.data();
      size_t sizes = size;
      int tag = kTag;
      ASSERT_EQ(net->irecv(comm, 1, &data, &sizes, &tag, &mh, &request), abi::kSuccess);
      ASSERT_NE(request, nullptr);
      ASSERT_TRUE(peer.channel->signal());
    } else {
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, buffer.data(), static_cast<int>(size), kTag, mh, &request));
    }
    int got = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &got));
    EXPECT_EQ(got, static_cast<int>(std::min<size_t>(size, INT_MAX)))
        << "the receive completed with part of the message";
    EXPECT_TRUE(verifyPattern(buffer.data(), size, 15)) << "the message did not land whole";
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 300);
}

const char* skipReason() {
  if (testProvider() != "efa") return "only EFA cuts large writes (softefa, the stand-in)";
  if (testProtocol() != "rdma") return "sendrecv sends tagged messages: no RMA writes to cut";
  return nullptr;
}

TEST(LargeMessage, OneAndAHalfGiBLandsWhole) {
  if (const char* why = skipReason()) GTEST_SKIP() << why;
  NNF_SKIP_KNOWN_FAILURE();
  moveWhole(size_t{3} << 29, false);
}

TEST(LargeMessage, ThreeGiBLessOneByteLandsWholeThroughSizeT) {
  if (const char* why = skipReason()) GTEST_SKIP() << why;
  NNF_SKIP_KNOWN_FAILURE();
  moveWhole((size_t{3} << 30) - 1, true);
}

}  // namespace
}  // namespace nnf::test
