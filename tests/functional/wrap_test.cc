// Sequence numbers across their wrap, on real providers. Messages are matched per NCCL tag by
// sequence number: 13 bits of sendrecv's tags, 16 bits of rdma's descriptors and eager headers.
// NCCL_FABRIC_SEQUENCE_START (both ends) starts every tag a few messages before the wrap of
// both, so that a short run crosses it with receives posted ahead (descriptors waiting for their
// sends), behind (eager messages waiting for their receives, on rdma) and grouped over several
// tags.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kBeforeWrap = 20;  // messages per tag before the 16-bit (and 13-bit) wrap
constexpr int kMessages = 300;
constexpr int kAhead = 32;  // receives posted before their sends
constexpr int kSizes[] = {0, 8, 4096, 5000, 64 << 10, 1 << 20};
constexpr int kLargest = 1 << 20;

int sizeOf(int message) {
  return kSizes[message % (sizeof(kSizes) / sizeof(kSizes[0]))];
}

void startNearTheWrap(ScopedEnv* env) {
  env->set("NCCL_FABRIC_SEQUENCE_START", std::to_string(65536 - kBeforeWrap));
}

// `receiverBehind`: the receiver posts each receive only once the sender posted its send (small
// rdma messages then go eagerly and wait in their bounce entries); else kAhead ahead.
void oneTag(bool receiverBehind) {
  ScopedEnv env;
  startNearTheWrap(&env);
  const int window = receiverBehind ? 1 : kAhead;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer out(size_t{kLargest} * kAhead);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    if (!receiverBehind) {  // receives posted ahead
      ASSERT_TRUE(peer.channel->wait());
    }
    std::vector<void*> requests;
    for (int m = 0; m < kMessages; ++m) {
      uint8_t* data = out.data() + size_t{kLargest} * (m % kAhead);
      fillPattern(data, sizeOf(m), 500 + m);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizeOf(m), 3, mh, &request));
      if (receiverBehind) {
        ASSERT_TRUE(peer.channel->signal());
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr)) << "message " << m;
        ASSERT_TRUE(peer.channel->wait());
        continue;
      }
      requests.push_back(request);
      if (requests.size() == kAhead) {
        std::vector<int> sizes;
        ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
        requests.clear();
        // Meanwhile the receiver's slots may wait for our answers to descriptors whose messages
        // went eagerly: the device keeps progressing, as NCCL's proxy does.
        Progressor progressor(peer);
        ASSERT_TRUE(peer.channel->wait());  // the next window of receives is posted
      }
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    dereg(peer, comm, mh);
    peer.channel->finishBarrier(60);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer in(size_t{kLargest} * kAhead);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mh));
    for (int first = 0; first < kMessages; first += window) {
      int last = std::min(kMessages, first + window);
      std::vector<void*> requests;
      if (receiverBehind) {  // its send is posted
        ASSERT_TRUE(peer.channel->wait());
      }
      for (int m = first; m < last; ++m) {
        void* request;
        ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data() + size_t{kLargest} * (m % kAhead),
                                         kLargest, 3, mh, &request));
        requests.push_back(request);
      }
      if (!receiverBehind) {
        ASSERT_TRUE(peer.channel->signal());
      }
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
      for (int m = first; m < last; ++m) {
        ASSERT_EQ(sizes[m - first], sizeOf(m)) << "message " << m;
        ASSERT_TRUE(verifyPattern(in.data() + size_t{kLargest} * (m % kAhead), sizeOf(m), 500 + m))
            << "message " << m;
      }
      if (receiverBehind) {
        ASSERT_TRUE(peer.channel->signal());
      }
    }
    dereg(peer, comm, mh);
    peer.channel->finishBarrier(60);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 300);
}

TEST(Wrap, OneTagAcrossTheWrapWithReceivesPostedAhead) {
  oneTag(/*receiverBehind=*/false);
}

TEST(Wrap, OneTagAcrossTheWrapWithReceivesPostedBehind) {
  oneTag(/*receiverBehind=*/true);
}

// rdma: small messages that go eagerly while their receives are not posted yet, across the wrap.
// Each waits in its bounce entry until its receive comes: the receiver must tell "not received
// yet" (ahead of its tag's next number) from "received already" (behind it) modulo 2^16, or it
// takes a message numbered after the wrap for one whose receive has gone and drops it. The
// receiver goes quiet first (the sender then sends eagerly), as in eager_test.
TEST(Wrap, EagerMessagesAcrossTheWrapWaitForTheirReceives) {
  if (testProtocol() != "rdma") GTEST_SKIP() << "the eager path is the rdma protocol's";
  ScopedEnv env;
  startNearTheWrap(&env);
  constexpr int kEager = 48;  // fewer than the receiver's 64 bounce entries
  constexpr int kTag = 5, kWarmTag = 6;
  constexpr int kSlot = 4096;
  auto sizeOf = [](int m) { return (m * 37) % 2000; };
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer out(size_t{kSlot} * (kEager + 1));
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    void* request;
    // The first message goes by descriptor; the receive after it grants the bounce entries.
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, out.data(), 8, kWarmTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the receiver is quiet
    std::vector<void*> requests;
    for (int m = 0; m < kEager; ++m) {
      uint8_t* data = out.data() + size_t{kSlot} * (m + 1);
      fillPattern(data, sizeOf(m), 900 + m);
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizeOf(m), kTag, mh, &request));
      requests.push_back(request);
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));  // eager: no receive is posted
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, out.data(), 8, kWarmTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer in(kSlot);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mh));
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), 8, kWarmTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    // Progress meanwhile (shm completes a write once its target progresses); the sender sends
    // this once its eager sends have completed.
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), 8, kWarmTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_TRUE(peer.channel->wait());
    for (int m = 0; m < kEager; ++m) {
      fillSentinel(in.data(), in.size());
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data(), kSlot, kTag, mh, &request));
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size)) << "message " << m;
      ASSERT_EQ(size, sizeOf(m)) << "message " << m;
      ASSERT_TRUE(verifyPattern(in.data(), sizeOf(m), 900 + m)) << "message " << m;
    }
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

// Grouped receives of maxRecvs buffers, one tag each, across the wrap: every tag wraps at once.
TEST(Wrap, GroupedReceivesOverSeveralTagsAcrossTheWrap) {
  ScopedEnv env;
  startNearTheWrap(&env);
  constexpr int kGroups = 60;
  constexpr int kPart = 16 << 10;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    const int n = peer.props.maxRecvs;
    HostBuffer out(size_t{kPart} * n);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    for (int g = 0; g < kGroups; ++g) {
      std::vector<void*> requests(n);
      // The parts go in reverse order of their tags: matching is per tag, never by arrival.
      for (int i = n - 1; i >= 0; --i) {
        int size = (g + i) % 3 == 0 ? 0 : kPart - 7 * i;
        fillPattern(out.data() + size_t{kPart} * i, size, g * 16 + i);
        ASSERT_NO_FATAL_FAILURE(
            postSend(peer, comm, out.data() + size_t{kPart} * i, size, 10 + i, mh, &requests[i]));
      }
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    }
    dereg(peer, comm, mh);
    peer.channel->finishBarrier(60);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    const int n = peer.props.maxRecvs;
    HostBuffer in(size_t{kPart} * n);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mh));
    for (int g = 0; g < kGroups; ++g) {
      std::vector<void*> data(n), mhs(n, mh);
      std::vector<int> sizes(n, kPart), tags(n);
      for (int i = 0; i < n; ++i) {
        data[i] = in.data() + size_t{kPart} * i;
        tags[i] = 10 + i;
      }
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecvGroup(peer, comm, n, data.data(), sizes.data(), tags.data(),
                                            mhs.data(), &request));
      std::vector<int> got(n, -1);
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, got.data()));
      for (int i = 0; i < n; ++i) {
        int size = (g + i) % 3 == 0 ? 0 : kPart - 7 * i;
        ASSERT_EQ(got[i], size) << "group " << g << " part " << i;
        ASSERT_TRUE(verifyPattern(data[i], size, g * 16 + i)) << "group " << g << " part " << i;
      }
    }
    dereg(peer, comm, mh);
    peer.channel->finishBarrier(60);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 300);
}

}  // namespace
}  // namespace nnf::test
