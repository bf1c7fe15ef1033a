// Grouped receives (irecv with n > 1): one request, n buffers told apart by tag, filled by n
// sends that may arrive in any tag order. NCCL uses them for PXN and all-to-all patterns.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"

namespace nnf::test {
namespace {

constexpr int kSlot = 64 << 10;
constexpr int kGroupsInFlight = 4;
constexpr int kRounds = 3;

int groupTag(int j) {
  return 100 + 3 * j;
}
// Buffer 1 gets an empty message: zero-byte parts of a group are common in NCCL.
int groupSize(int group, int j) {
  return j == 1 ? 0 : 1000 * (j + 1) + 7 * group + j;
}
uint64_t groupMessage(int round, int group, int j) {
  return 10000 * round + 100 * group + j;
}

// The order in which the sender sends a group's parts: reversed and rotated, so neither posting
// order nor its reverse is the buffer order.
std::vector<int> sendOrder(int n, int group) {
  std::vector<int> order(n);
  for (int j = 0; j < n; ++j) order[j] = n - 1 - j;
  std::rotate(order.begin(), order.begin() + (group % n), order.end());
  return order;
}

TEST(GroupedReceive, EachBufferGetsTheSendWithItsTag) {
  auto sender = [&](Peer& peer) {
    const int n = peer.props.maxRecvs;
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{kSlot} * n * kGroupsInFlight);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int round = 0; round < kRounds; ++round) {
      std::vector<void*> requests;
      for (int group = 0; group < kGroupsInFlight; ++group) {
        for (int j : sendOrder(n, group)) {
          uint8_t* slot = buffer.data() + size_t{kSlot} * (group * n + j);
          fillPattern(slot, groupSize(group, j), groupMessage(round, group, j));
          void* request;
          ASSERT_NO_FATAL_FAILURE(
              postSend(peer, comm, slot, groupSize(group, j), groupTag(j), mh, &request));
          requests.push_back(request);
        }
      }
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    }
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    const int n = peer.props.maxRecvs;
    ASSERT_LE(n, 64) << "maxRecvs beyond anything NCCL groups";
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size_t{kSlot} * n * kGroupsInFlight);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int round = 0; round < kRounds; ++round) {
      SCOPED_TRACE("round " + std::to_string(round) + ", " + std::to_string(n) + " per group");
      fillSentinel(buffer.data(), buffer.size());
      std::vector<void*> requests(kGroupsInFlight);
      for (int group = 0; group < kGroupsInFlight; ++group) {
        std::vector<void*> data(n), mhandles(n, mh);
        std::vector<int> sizes(n, kSlot), tags(n);
        for (int j = 0; j < n; ++j) {
          data[j] = buffer.data() + size_t{kSlot} * (group * n + j);
          tags[j] = groupTag(j);
        }
        ASSERT_NO_FATAL_FAILURE(postRecvGroup(peer, comm, n, data.data(), sizes.data(), tags.data(),
                                              mhandles.data(), &requests[group]));
      }
      for (int group = 0; group < kGroupsInFlight; ++group) {
        std::vector<int> sizes(n, -1);
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, requests[group], sizes.data()));
        for (int j = 0; j < n; ++j) {
          const uint8_t* slot = buffer.data() + size_t{kSlot} * (group * n + j);
          SCOPED_TRACE("group " + std::to_string(group) + ", buffer " + std::to_string(j) +
                       " (tag " + std::to_string(groupTag(j)) + ")");
          EXPECT_EQ(sizes[j], groupSize(group, j)) << "test reported the wrong size";
          EXPECT_TRUE(verifyPattern(slot, groupSize(group, j), groupMessage(round, group, j)));
          EXPECT_TRUE(verifySentinel(slot + groupSize(group, j), kSlot - groupSize(group, j)));
        }
      }
    }
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver);
}

constexpr int kSmall = 256;
int limitSize(int k) {
  return 1 + (k * 37) % kSmall;
}

TEST(GroupedReceive, SendSideTakes32TimesMaxRecvsInFlight) {
  // NCCL may have 32 grouped receives of maxRecvs parts outstanding, so the send side must
  // accept 32 x maxRecvs sends on one comm; one more may be refused (NULL or error), never crash.
  auto sender = [&](Peer& peer) {
    const int n = peer.props.maxRecvs;
    const int total = abi::kMaxRequests * n;
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{kSmall} * (total + 1));
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_TRUE(peer.channel->wait());  // all receives are posted
    std::vector<void*> requests(total);
    for (int k = 0; k < total; ++k) {
      uint8_t* slot = buffer.data() + size_t{kSmall} * k;
      fillPattern(slot, limitSize(k), 900000 + k);
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, comm, slot, limitSize(k), groupTag(k % n), mh, &requests[k]))
          << "send " << k << " of " << total;
    }
    void* extra = nullptr;
    abi::Result result =
        peer.net->isend(comm, buffer.data() + size_t{kSmall} * total, 1, groupTag(0), mh, &extra);
    EXPECT_TRUE(result != abi::kSuccess || extra == nullptr)
        << "send " << total + 1 << " on one comm was accepted: the limit is 32 x maxRecvs";
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    const int n = peer.props.maxRecvs;
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size_t{kSmall} * abi::kMaxRequests * n);
    fillSentinel(buffer.data(), buffer.size());
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    std::vector<void*> requests(abi::kMaxRequests);
    for (int r = 0; r < abi::kMaxRequests; ++r) {
      std::vector<void*> data(n), mhandles(n, mh);
      std::vector<int> sizes(n, kSmall), tags(n);
      for (int j = 0; j < n; ++j) {
        data[j] = buffer.data() + size_t{kSmall} * (r * n + j);
        tags[j] = groupTag(j);
      }
      ASSERT_NO_FATAL_FAILURE(postRecvGroup(peer, comm, n, data.data(), sizes.data(), tags.data(),
                                            mhandles.data(), &requests[r]));
    }
    ASSERT_TRUE(peer.channel->signal());
    for (int r = 0; r < abi::kMaxRequests; ++r) {
      std::vector<int> sizes(n, -1);
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, requests[r], sizes.data()));
      for (int j = 0; j < n; ++j) {
        int k = r * n + j;
        const uint8_t* slot = buffer.data() + size_t{kSmall} * k;
        EXPECT_EQ(sizes[j], limitSize(k)) << "group " << r << " buffer " << j;
        EXPECT_TRUE(verifyPattern(slot, limitSize(k), 900000 + k))
            << "group " << r << " buffer " << j;
        EXPECT_TRUE(verifySentinel(slot + limitSize(k), kSmall - limitSize(k)));
      }
    }
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver);
}

}  // namespace
}  // namespace nnf::test
