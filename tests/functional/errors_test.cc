// Bad input: a send larger than its receive, malformed listen handles, more requests than
// NCCL_NET_MAX_REQUESTS, out-of-range devices. Each must give an error code and a WARN, and
// leave the plugin working; never a crash, a hang or silent truncation.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "platform/provider_rules.h"
#include "support/harness.h"
#include "support/known_failures.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x51;

// One message through a fresh comm pair in one process: proves the plugin still works.
void transferLocally(Peer& peer, int size, uint64_t message) {
  HostBuffer in(size), out(size);
  transferOnFreshPair(peer, out.data(), in.data(), size, message);
}

struct Truncation {
  int sent;
  int posted;
};

class TruncatingReceive : public ::testing::TestWithParam<Truncation> {};

TEST_P(TruncatingReceive, FailsTheReceiveWithOneWarn) {
  NNF_SKIP_KNOWN_FAILURE();
  const Truncation sizes = GetParam();
  const size_t limit = platform::truncationReportLimit(platform::familyOf(test::testProvider()));
  // The rdma protocol knows the receive buffer's size before it writes: no provider limit.
  const bool rdma = test::testProtocol() == "rdma";
  if (!rdma && limit != 0 && static_cast<size_t>(sizes.sent) > limit) {
    // No plugin can report what the provider never returns (docs/troubleshooting.md); the rule
    // is checked against the provider itself in provider_quirks_test.
    GTEST_SKIP() << test::testProvider() << " never reports the truncation of a message above "
                 << limit << " bytes (platform::truncationReportLimit)";
  }
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(sizes.sent);
    fillPattern(buffer.data(), sizes.sent, 1);
    void *mh, *request;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), sizes.sent, kTag, mh, &request));
    // Success or an error are both fair for the sender; not finishing is not.
    Outcome outcome = pollRequest(peer, request, nullptr);
    EXPECT_FALSE(outcome.timedOut) << "the sender of a truncated message hangs";
    if (rdma) {
      // rdma refuses before a byte moves, and says so to the sender too.
      EXPECT_EQ(outcome.result, abi::kInternalError) << "the send of a message too large";
    }
    ASSERT_TRUE(peer.channel->signal());  // done with the comm: the receiver may close
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(sizes.sent);
    fillSentinel(buffer.data(), buffer.size());
    void *mh, *request;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    peer.resetWarnings();
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), sizes.posted, kTag, mh, &request));
    int size = -1;
    Outcome outcome = pollRequest(peer, request, &size);
    EXPECT_FALSE(outcome.timedOut) << "a truncating receive never completes";
    if (!outcome.timedOut) {
      // docs/architecture.md and docs/troubleshooting.md promise ncclInternalError: the caller
      // is wrong, not the network (ncclRemoteError would send users looking for a dead peer).
      EXPECT_EQ(outcome.result, abi::kInternalError)
          << sizes.sent << " B into " << sizes.posted << " B (size " << size << ")"
          << (outcome.result == abi::kSuccess ? ": silent truncation" : "");
    }
    EXPECT_EQ(peer.warnings(), 1) << "one WARN expected for the truncated message";
    // Nothing may land beyond the posted buffer.
    EXPECT_TRUE(verifySentinel(buffer.data() + sizes.posted, sizes.sent - sizes.posted));
    ASSERT_TRUE(peer.channel->wait());
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
    // The failure stays with that request: new comms work.
    ASSERT_NO_FATAL_FAILURE(transferLocally(peer, 4096, 77));
  };
  runTwoProcesses(sender, receiver);
}

INSTANTIATE_TEST_SUITE_P(Sizes, TruncatingReceive,
                         ::testing::Values(Truncation{8192, 4096}, Truncation{2, 1},
                                           Truncation{4 << 20, 1 << 20}),
                         [](const ::testing::TestParamInfo<Truncation>& info) {
                           return std::to_string(info.param.sent) + "Into" +
                                  std::to_string(info.param.posted);
                         });

// Connects with `handle` until the plugin answers; it must be an error, within the deadline.
void expectConnectRejected(Peer& peer, Handle* handle, const std::string& what) {
  SCOPED_TRACE("handle: " + what);
  int before = peer.warnings();
  Deadline deadline(10);
  void* comm = nullptr;
  abi::Result result = abi::kSuccess;
  while (result == abi::kSuccess && comm == nullptr && !deadline.expired()) {
    abi::NetDeviceHandleV8* devComm = nullptr;
    result = peer.net->connect(peer.dev, handle->bytes, &comm, &devComm);
  }
  EXPECT_NE(result, abi::kSuccess)
      << (comm != nullptr ? "connect made a comm" : "connect neither failed nor finished");
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(peer.warnings() - before, 1) << "one WARN expected for a malformed handle";
}

TEST(MalformedHandle, ConnectFailsWithAWarn) {
  runOneProcess(
      [](Peer& peer) {
        Handle valid;
        void* listen;
        ASSERT_NO_FATAL_FAILURE(listenOn(peer, &valid, &listen));

        Handle handle;
        memset(handle.bytes, 0, sizeof(handle.bytes));
        expectConnectRejected(peer, &handle, "all zeros");

        std::mt19937 random(12345);
        for (char& byte : handle.bytes) byte = static_cast<char>(random());
        expectConnectRejected(peer, &handle, "random bytes");

        memcpy(handle.bytes, valid.bytes, sizeof(handle.bytes));
        for (int i = 0; i < 8; ++i) handle.bytes[i] = static_cast<char>(~handle.bytes[i]);
        expectConnectRejected(peer, &handle, "valid handle with its first 8 bytes inverted");

        for (size_t keep : {size_t{4}, size_t{16}, size_t{32}}) {
          memcpy(handle.bytes, valid.bytes, sizeof(handle.bytes));
          memset(handle.bytes + keep, 0, sizeof(handle.bytes) - keep);
          if (memcmp(handle.bytes, valid.bytes, sizeof(handle.bytes)) == 0) continue;
          expectConnectRejected(peer, &handle,
                                "valid handle truncated to " + std::to_string(keep) + " bytes");
        }

        // A bit flipped anywhere the handle is not zero: the result may still name a reachable
        // listener, so success is fair, but never a crash, and never a connect that stays pending.
        std::vector<size_t> pending;
        for (size_t i = 0; i < sizeof(valid.bytes) && pending.size() < 2; ++i) {
          if (valid.bytes[i] == 0) continue;
          memcpy(handle.bytes, valid.bytes, sizeof(handle.bytes));
          handle.bytes[i] = static_cast<char>(handle.bytes[i] ^ 0x10);
          Deadline deadline(5);
          void* comm = nullptr;
          abi::Result result = abi::kSuccess;
          while (result == abi::kSuccess && comm == nullptr && !deadline.expired()) {
            abi::NetDeviceHandleV8* devComm = nullptr;
            result = peer.net->connect(peer.dev, handle.bytes, &comm, &devComm);
            // In case the handle still leads here, let the listener answer.
            void* stray = nullptr;
            EXPECT_EQ(peer.net->accept(listen, &stray, &devComm), abi::kSuccess);
            if (stray != nullptr) closeRecv(peer, stray);
          }
          if (result == abi::kSuccess && comm == nullptr) pending.push_back(i);
          if (comm != nullptr) closeSend(peer, comm);
        }
        EXPECT_TRUE(pending.empty()) << "with byte " << (pending.empty() ? 0 : pending[0])
                                     << " altered, connect neither failed nor finished in 5 s"
                                     << (pending.size() > 1 ? " (and at least one more byte)" : "");
        closeListen(peer, listen);
        // The plugin is unharmed.
        ASSERT_NO_FATAL_FAILURE(transferLocally(peer, 65536, 3));
      },
      120, Network::kIsolated);
}

TEST(RequestLimit, The33rdReceiveIsRefusedAndTheCommRecovers) {
  constexpr int kSize = 512;
  constexpr int kTotal = abi::kMaxRequests + 1;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{kSize} * kTotal);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_TRUE(peer.channel->wait());  // the receiver has tried its 33rd
    for (int k = 0; k < kTotal; ++k) {
      uint8_t* slot = buffer.data() + size_t{kSize} * k;
      fillPattern(slot, kSize - k, 3300 + k);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, slot, kSize - k, kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    }
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size_t{kSize} * kTotal);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    std::vector<void*> requests(abi::kMaxRequests);
    for (int k = 0; k < abi::kMaxRequests; ++k)
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, buffer.data() + size_t{kSize} * k, kSize, kTag, mh, &requests[k]));
    void* extra = nullptr;
    uint8_t* last = buffer.data() + size_t{kSize} * abi::kMaxRequests;
    int size = kSize, tag = kTag;
    void* data = last;
    abi::Result result = peer.net->irecv(comm, 1, &data, &size, &tag, &mh, &extra);
    EXPECT_TRUE(result != abi::kSuccess || extra == nullptr)
        << "a 33rd receive on one comm was accepted: NCCL_NET_MAX_REQUESTS is 32";
    ASSERT_TRUE(peer.channel->signal());
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    for (int k = 0; k < abi::kMaxRequests; ++k) {
      EXPECT_EQ(sizes[k], kSize - k);
      EXPECT_TRUE(verifyPattern(buffer.data() + size_t{kSize} * k, kSize - k, 3300 + k));
    }
    // With the window drained the next receive is accepted and gets the 33rd message.
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, last, kSize, kTag, mh, &request));
    int got = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &got));
    EXPECT_EQ(got, kSize - abi::kMaxRequests);
    EXPECT_TRUE(verifyPattern(last, got, 3300 + abi::kMaxRequests));
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver);
}

TEST(BadArguments, OutOfRangeDevicesAreErrors) {
  runOneProcess([](Peer& peer) {
    abi::PropertiesV8 props{};
    Handle handle;
    void* listen = nullptr;
    for (int dev : {peer.ndev, peer.ndev + 7, -1}) {
      SCOPED_TRACE("device " + std::to_string(dev));
      int before = peer.warnings();
      EXPECT_NE(peer.net->getProperties(dev, &props), abi::kSuccess);
      EXPECT_NE(peer.net->listen(dev, handle.bytes, &listen), abi::kSuccess);
      EXPECT_EQ(peer.warnings() - before, 2) << "one WARN per refused call";
    }
    ASSERT_NO_FATAL_FAILURE(transferLocally(peer, 1, 5));
  });
}

}  // namespace
}  // namespace nnf::test
