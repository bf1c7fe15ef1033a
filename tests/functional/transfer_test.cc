// Data through the plugin between two processes, driven like NCCL: every size from empty to
// 256 MiB, many requests in flight, sends that arrive before their receives, receives larger
// than their sends, and grouped receives. Every byte is verified.
#include <algorithm>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x2A;
constexpr size_t kTail = 4096;  // bytes past each message checked for stray writes

TEST(Transfer, EverySizeFromEmptyTo256MiB) {
  // Odd sizes beside the powers of two catch tail handling in chunked paths.
  static const std::vector<int> kSizes = {
      0, 1, 7, 4096, 4097, 65536, 1 << 20, (1 << 20) + 3, 16 << 20, 256 << 20};
  auto sender = [&](Peer& peer) { sendEachInTurn(peer, kSizes, kTag); };
  auto receiver = [&](Peer& peer) { receiveEachInTurn(peer, kSizes, kTag, kTail); };
  runTwoProcesses(sender, receiver, 120);
}

// Distinct sizes, so that a message landing in the wrong buffer shows as a size mismatch too.
int inFlightSize(int i) {
  return 2000 * i + 1 + i % 3;
}
constexpr int kSlot = 64 << 10;

TEST(Transfer, FullWindowOf32RequestsMatchesInPostingOrder) {
  constexpr int kRounds = 6;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{abi::kMaxRequests} * kSlot);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int round = 0; round < kRounds; ++round) {
      std::vector<void*> requests(abi::kMaxRequests);
      for (int i = 0; i < abi::kMaxRequests; ++i) {
        uint8_t* slot = buffer.data() + size_t{kSlot} * i;
        fillPattern(slot, inFlightSize(i), round * 100 + i);
        ASSERT_NO_FATAL_FAILURE(
            postSend(peer, comm, slot, inFlightSize(i), kTag, mh, &requests[i]));
      }
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    }
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size_t{abi::kMaxRequests} * kSlot);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int round = 0; round < kRounds; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      fillSentinel(buffer.data(), buffer.size());
      std::vector<void*> requests(abi::kMaxRequests);
      for (int i = 0; i < abi::kMaxRequests; ++i)
        ASSERT_NO_FATAL_FAILURE(
            postRecv(peer, comm, buffer.data() + size_t{kSlot} * i, kSlot, kTag, mh, &requests[i]));
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
      for (int i = 0; i < abi::kMaxRequests; ++i) {
        const uint8_t* slot = buffer.data() + size_t{kSlot} * i;
        EXPECT_EQ(sizes[i], inFlightSize(i)) << "request " << i;
        EXPECT_TRUE(verifyPattern(slot, inFlightSize(i), round * 100 + i)) << "request " << i;
        EXPECT_TRUE(verifySentinel(slot + inFlightSize(i), kSlot - inFlightSize(i)))
            << "request " << i;
      }
    }
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver);
}

// Small (eager) and large (rendezvous on most providers) messages mixed.
int earlySize(int i) {
  return i % 4 == 3 ? (1 << 20) + i : 100 * i;
}
constexpr size_t kEarlySlot = (1 << 20) + 64;

TEST(Transfer, SendsPostedBeforeTheirReceives) {
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(abi::kMaxRequests * kEarlySlot);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    std::vector<void*> requests(abi::kMaxRequests, nullptr);
    bool signalled = false;
    Deadline deadline(kOpTimeoutSec);
    for (int i = 0; i < abi::kMaxRequests; ++i) {
      uint8_t* slot = buffer.data() + kEarlySlot * i;
      fillPattern(slot, earlySize(i), 500 + i);
      // Post without waiting for the receiver; a plugin that cannot start a send before the
      // receive exists returns NULL, and then the receiver is told to go ahead.
      while (requests[i] == nullptr) {
        ASSERT_EQ(peer.net->isend(comm, slot, earlySize(i), kTag, mh, &requests[i]), abi::kSuccess);
        if (requests[i] == nullptr && !signalled) {
          ASSERT_TRUE(peer.channel->signal());
          signalled = true;
        }
        ASSERT_FALSE(deadline.expired()) << "isend " << i << " never started";
      }
    }
    if (!signalled) {
      ASSERT_TRUE(peer.channel->signal());
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(abi::kMaxRequests * kEarlySlot);
    fillSentinel(buffer.data(), buffer.size());
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_TRUE(peer.channel->wait());
    // Let the eager messages arrive before anything is posted for them.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<void*> requests(abi::kMaxRequests);
    for (int i = 0; i < abi::kMaxRequests; ++i)
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data() + kEarlySlot * i,
                                       static_cast<int>(kEarlySlot), kTag, mh, &requests[i]));
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    for (int i = 0; i < abi::kMaxRequests; ++i) {
      const uint8_t* slot = buffer.data() + kEarlySlot * i;
      EXPECT_EQ(sizes[i], earlySize(i)) << "request " << i;
      EXPECT_TRUE(verifyPattern(slot, earlySize(i), 500 + i)) << "request " << i;
      EXPECT_TRUE(verifySentinel(slot + earlySize(i), kEarlySlot - earlySize(i)))
          << "request " << i;
    }
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver);
}

TEST(Transfer, ReceiveLargerThanSendReportsTheRealSize) {
  static const std::vector<int> kSizes = {0, 1, 1000, 65535, (1 << 20) - 1};
  constexpr int kPosted = 1 << 20;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kPosted);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (size_t i = 0; i < kSizes.size(); ++i) {
      fillPattern(buffer.data(), kSizes[i], 700 + i);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), kSizes[i], kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    }
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kPosted);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (size_t i = 0; i < kSizes.size(); ++i) {
      SCOPED_TRACE(std::to_string(kSizes[i]) + " B into " + std::to_string(kPosted) + " B");
      fillSentinel(buffer.data(), kPosted);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), kPosted, kTag, mh, &request));
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
      EXPECT_EQ(size, kSizes[i]) << "test must report the size sent, not the size posted";
      EXPECT_TRUE(verifyPattern(buffer.data(), kSizes[i], 700 + i));
      EXPECT_TRUE(verifySentinel(buffer.data() + kSizes[i], kPosted - kSizes[i]));
    }
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver);
}

}  // namespace
}  // namespace nnf::test
