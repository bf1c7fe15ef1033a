// The connection life cycle as NCCL runs it: properties, many comms at once, close and
// reconnect, closing with requests still posted, and iflush on host memory.
#include <rdma/fabric.h>

#include <chrono>
#include <cstring>
#include <set>
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

constexpr int kTag = 0x33;

TEST(Properties, EveryDeviceReportsMeaningfulValues) {
  runOneProcess([](Peer& peer) {
    std::set<uint64_t> guids;
    for (int dev = 0; dev < peer.ndev; ++dev) {
      SCOPED_TRACE("device " + std::to_string(dev));
      abi::PropertiesV8 props;
      memset(&props, 0xCD, sizeof(props));  // no field may be left unwritten
      ASSERT_EQ(peer.net->getProperties(dev, &props), abi::kSuccess);
      ASSERT_NE(props.name, nullptr);
      EXPECT_GT(strlen(props.name), 0u);
      if (props.pciPath != nullptr) {
        EXPECT_EQ(std::string(props.pciPath).rfind("/sys/", 0), 0u) << props.pciPath;
      }
      EXPECT_TRUE(guids.insert(props.guid).second) << "guid shared with another device";
      EXPECT_TRUE(props.ptrSupport & abi::kPtrHost) << "ptrSupport " << props.ptrSupport;
      EXPECT_EQ(props.ptrSupport & ~(abi::kPtrHost | abi::kPtrCuda | abi::kPtrDmaBuf), 0);
      EXPECT_EQ(props.regIsGlobal, 1);
      EXPECT_GT(props.speed, 0);
      EXPECT_GE(props.port, 0);
      EXPECT_GE(props.latency, 0.0f);
      EXPECT_GT(props.maxComms, 0);
      EXPECT_GE(props.maxRecvs, 1);
      EXPECT_LE(props.maxRecvs, 64);
      EXPECT_EQ(props.netDeviceType, abi::kNetDeviceHost);
      EXPECT_EQ(props.netDeviceVersion, 0) << "host-side plugins report version 0";
    }
    // Stable across calls: NCCL may ask again at any time.
    int again = -1;
    ASSERT_EQ(peer.net->devices(&again), abi::kSuccess);
    EXPECT_EQ(again, peer.ndev);
    abi::PropertiesV8 first, second;
    ASSERT_EQ(peer.net->getProperties(0, &first), abi::kSuccess);
    ASSERT_EQ(peer.net->getProperties(0, &second), abi::kSuccess);
    EXPECT_STREQ(first.name, second.name);
    EXPECT_EQ(first.guid, second.guid);
    EXPECT_EQ(first.speed, second.speed);
    EXPECT_EQ(peer.warnings(), 0) << "a clean start logs no WARN";
  });
}

TEST(Listen, HandleFitsAndCommIsNeverNull) {
  runOneProcess([](Peer& peer) {
    // The plugin may write at most NCCL_NET_HANDLE_MAXSIZE bytes: guard bytes around it.
    char area[abi::kHandleMaxSize + 64];
    memset(area, 0x5C, sizeof(area));
    void* listen = nullptr;
    ASSERT_EQ(peer.net->listen(peer.dev, area + 32, &listen), abi::kSuccess);
    ASSERT_NE(listen, nullptr);
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(area[i], 0x5C) << "byte before the handle written";
      EXPECT_EQ(area[32 + abi::kHandleMaxSize + i], 0x5C) << "byte past 128 written";
    }
    // Two listeners give two different handles.
    Handle other;
    void* listen2;
    ASSERT_NO_FATAL_FAILURE(listenOn(peer, &other, &listen2));
    EXPECT_NE(memcmp(area + 32, other.bytes, abi::kHandleMaxSize), 0);
    closeListen(peer, listen);
    closeListen(peer, listen2);
  });
}

constexpr int kComms = 64;
constexpr int kPerComm = 4;
constexpr int kConnSlot = 256 << 10;
int connSize(int comm, int k) {
  static const int kBase[kPerComm] = {0, 100, 65536, kConnSlot - 64};
  return k == 0 ? 0 : kBase[k] + comm;
}
uint64_t connMessage(int comm, int k) {
  return 1000 * comm + k;
}

TEST(Connections, SixtyFourCommsAtOnceEachWithItsOwnData) {
  auto sender = [&](Peer& peer) {
    std::vector<Handle> handles(kComms);
    for (Handle& handle : handles) ASSERT_TRUE(peer.channel->recv(handle.bytes, sizeof(handle)));
    // Every connect is pending at once, as when NCCL sets up a ring and a tree together.
    std::vector<void*> comms(kComms, nullptr);
    int open = 0;
    Deadline deadline(kOpTimeoutSec);
    while (open < kComms) {
      for (int c = 0; c < kComms; ++c) {
        if (comms[c] != nullptr) continue;
        abi::NetDeviceHandleV8* devComm = nullptr;
        ASSERT_EQ(peer.net->connect(peer.dev, handles[c].bytes, &comms[c], &devComm), abi::kSuccess)
            << "connect " << c;
        open += comms[c] != nullptr;
      }
      ASSERT_FALSE(deadline.expired()) << open << " of " << kComms << " connected";
    }
    ASSERT_TRUE(peer.channel->wait());  // the receiver has all its comms: traffic may start
    HostBuffer buffer(size_t{kConnSlot} * kPerComm * kComms);
    std::vector<void*> mhandles(kComms), requests;
    for (int c = 0; c < kComms; ++c) {
      // The same buffer registered on every comm: regIsGlobal makes this cheap.
      ASSERT_NO_FATAL_FAILURE(regHost(peer, comms[c], buffer.data(), buffer.size(), &mhandles[c]));
      for (int k = 0; k < kPerComm; ++k) {
        uint8_t* slot = buffer.data() + size_t{kConnSlot} * (c * kPerComm + k);
        fillPattern(slot, connSize(c, k), connMessage(c, k));
        void* request;
        ASSERT_NO_FATAL_FAILURE(
            postSend(peer, comms[c], slot, connSize(c, k), kTag, mhandles[c], &request));
        requests.push_back(request);
      }
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    for (int c = 0; c < kComms; ++c) {
      dereg(peer, comms[c], mhandles[c]);
      closeSend(peer, comms[c]);
    }
  };
  auto receiver = [&](Peer& peer) {
    std::vector<Handle> handles(kComms);
    std::vector<void*> listens(kComms), comms(kComms, nullptr);
    for (int c = 0; c < kComms; ++c) {
      ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handles[c], &listens[c]));
      ASSERT_TRUE(peer.channel->send(handles[c].bytes, sizeof(handles[c])));
    }
    int open = 0;
    Deadline deadline(kOpTimeoutSec);
    while (open < kComms) {
      for (int c = 0; c < kComms; ++c) {
        if (comms[c] != nullptr) continue;
        abi::NetDeviceHandleV8* devComm = nullptr;
        ASSERT_EQ(peer.net->accept(listens[c], &comms[c], &devComm), abi::kSuccess);
        open += comms[c] != nullptr;
      }
      ASSERT_FALSE(deadline.expired()) << open << " of " << kComms << " accepted";
    }
    HostBuffer buffer(size_t{kConnSlot} * kPerComm * kComms);
    fillSentinel(buffer.data(), buffer.size());
    std::vector<void*> mhandles(kComms), requests;
    for (int c = 0; c < kComms; ++c) {
      ASSERT_NO_FATAL_FAILURE(regHost(peer, comms[c], buffer.data(), buffer.size(), &mhandles[c]));
      for (int k = 0; k < kPerComm; ++k) {
        void* request;
        ASSERT_NO_FATAL_FAILURE(postRecv(peer, comms[c],
                                         buffer.data() + size_t{kConnSlot} * (c * kPerComm + k),
                                         kConnSlot, kTag, mhandles[c], &request));
        requests.push_back(request);
      }
    }
    ASSERT_TRUE(peer.channel->signal());
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    for (int c = 0; c < kComms; ++c)
      for (int k = 0; k < kPerComm; ++k) {
        const uint8_t* slot = buffer.data() + size_t{kConnSlot} * (c * kPerComm + k);
        SCOPED_TRACE("comm " + std::to_string(c) + ", message " + std::to_string(k));
        EXPECT_EQ(sizes[c * kPerComm + k], connSize(c, k));
        EXPECT_TRUE(verifyPattern(slot, connSize(c, k), connMessage(c, k)));
        EXPECT_TRUE(verifySentinel(slot + connSize(c, k), kConnSlot - connSize(c, k)));
      }
    for (int c = 0; c < kComms; ++c) {
      dereg(peer, comms[c], mhandles[c]);
      closeRecv(peer, comms[c]);
      closeListen(peer, listens[c]);
    }
  };
  runTwoProcesses(sender, receiver);
}

TEST(Connections, CloseAndReconnectTwentyTimesInOneProcess) {
  runOneProcess([](Peer& peer) {
    for (int round = 0; round < 20; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const int size = 4096 * round + round;  // round 0 is an empty message
      Handle handle;
      void *listen, *send, *recv;
      ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, &listen));
      ASSERT_NO_FATAL_FAILURE(connectLocal(peer, listen, &handle, &send, &recv));
      HostBuffer in(size + 64), out(size + 1);
      fillPattern(out.data(), size, round);
      fillSentinel(in.data(), size + 64);
      void *sendMh, *recvMh, *sendReq, *recvReq;
      ASSERT_NO_FATAL_FAILURE(regHost(peer, send, out.data(), out.size(), &sendMh));
      ASSERT_NO_FATAL_FAILURE(regHost(peer, recv, in.data(), in.size(), &recvMh));
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, recv, in.data(), size + 64, kTag, recvMh, &recvReq));
      ASSERT_NO_FATAL_FAILURE(postSend(peer, send, out.data(), size, kTag, sendMh, &sendReq));
      std::vector<int> sizes;
      ASSERT_NO_FATAL_FAILURE(waitAll(peer, {recvReq, sendReq}, &sizes));
      EXPECT_EQ(sizes[0], size);
      EXPECT_TRUE(verifyPattern(in.data(), size, round));
      EXPECT_TRUE(verifySentinel(in.data() + size, 64));
      dereg(peer, send, sendMh);
      dereg(peer, recv, recvMh);
      closeSend(peer, send);
      closeRecv(peer, recv);
      closeListen(peer, listen);
    }
    EXPECT_EQ(peer.warnings(), 0);
  });
}

TEST(Connections, ClosingWithRequestsPostedIsSafe) {
  NNF_SKIP_KNOWN_FAILURE();
  // Pair B's unreceived send needs the closed comm's id drained: without a drain (shm before
  // libfabric 2.0, where wildcard receives are unsafe) the send stays at the head of the sender's
  // queue and holds back pair C's (docs/troubleshooting.md). There pair B closes without it, and
  // the test says so by skipping once pairs A and C have passed.
  const bool unmatchedSend =
      platform::wildcardReceivesSafe(platform::familyOf(test::testProvider()), fi_version());
  // Under rdma nothing is sent that the receiver did not ask for: B's send fails instead (and
  // needs no drain, so it is posted on every provider).
  const bool rdma = test::testProtocol() == "rdma";
  // Comm pair A gets a receive nobody sends to, pair B a send nobody receives (large, so it
  // cannot complete eagerly); both are closed under their requests. Pair C must then work, and
  // none of B's data may surface in it.
  constexpr int kSize = 1 << 20;
  auto sender = [&](Peer& peer) {
    void *commA, *commB, *commC, *mhB, *mhC, *request = nullptr;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &commA));
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &commB));
    HostBuffer buffer(kSize);
    fillPattern(buffer.data(), kSize, 40);
    ASSERT_NO_FATAL_FAILURE(regHost(peer, commB, buffer.data(), buffer.size(), &mhB));
    if (unmatchedSend || rdma) {
      ASSERT_EQ(peer.net->isend(commB, buffer.data(), kSize, kTag, mhB, &request), abi::kSuccess);
    }
    ASSERT_TRUE(peer.channel->signal());
    if (rdma) {
      // rdma: B's send waits for a descriptor that never comes; the receiver's close notice
      // fails it. Polling it keeps this device progressing, which the receiver's close of A
      // waits for (our answer that nothing more will be written into A's buffer).
      int result = abi::kSuccess, done = 0;
      Deadline deadline(kOpTimeoutSec);
      while (result == abi::kSuccess && done == 0 && !deadline.expired()) {
        result = peer.net->test(request, &done, nullptr);
      }
      EXPECT_EQ(done, 0) << "a send completed though the receiver never asked for it";
      EXPECT_EQ(result, abi::kRemoteError) << "a send to a closed receiver should fail";
    }
    ASSERT_TRUE(peer.channel->wait());  // the receiver closed its comms
    closeSend(peer, commA);
    dereg(peer, commB, mhB);
    closeSend(peer, commB);
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &commC));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, commC, buffer.data(), buffer.size(), &mhC));
    fillPattern(buffer.data(), kSize, 41);
    ASSERT_NO_FATAL_FAILURE(postSend(peer, commC, buffer.data(), kSize, kTag, mhC, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    dereg(peer, commC, mhC);
    closeSend(peer, commC);
  };
  auto receiver = [&](Peer& peer) {
    void *listenA, *listenB, *listenC, *commA, *commB, *commC, *mhA, *mhC, *request;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listenA, &commA));
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listenB, &commB));
    HostBuffer buffer(kSize);
    fillSentinel(buffer.data(), kSize);
    ASSERT_NO_FATAL_FAILURE(regHost(peer, commA, buffer.data(), buffer.size(), &mhA));
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, commA, buffer.data(), kSize, kTag, mhA, &request));
    ASSERT_TRUE(peer.channel->wait());  // B's send is posted
    for (int i = 0; i < 1000; ++i) {
      int done = 0, size = -1;
      ASSERT_EQ(peer.net->test(request, &done, &size), abi::kSuccess);
      ASSERT_EQ(done, 0) << "a receive on a comm that nobody sent to completed (size " << size
                         << ")";
    }
    dereg(peer, commA, mhA);
    auto start = std::chrono::steady_clock::now();
    closeRecv(peer, commA);
    closeRecv(peer, commB);
    // The sender progresses meanwhile: no close waits for its safety net.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    closeListen(peer, listenA);
    closeListen(peer, listenB);
    EXPECT_TRUE(verifySentinel(buffer.data(), kSize)) << "a closed receive wrote its buffer";
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_TRUE(peer.channel->wait());  // the sender closed too
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listenC, &commC));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, commC, buffer.data(), buffer.size(), &mhC));
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, commC, buffer.data(), kSize, kTag, mhC, &request));
    int got = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &got));
    EXPECT_EQ(got, kSize);
    EXPECT_TRUE(verifyPattern(buffer.data(), kSize, 41)) << "data of a closed comm leaked in";
    dereg(peer, commC, mhC);
    closeRecv(peer, commC);
    closeListen(peer, listenC);
  };
  runTwoProcesses(sender, receiver);
  if (!unmatchedSend && !rdma && !HasFailure()) {
    GTEST_SKIP() << "pair B's unreceived send left out: shm before libfabric 2.0 does not drain "
                    "closed comms (pairs A and C passed)";
  }
}

TEST(Flush, HostMemoryNeedsNoFlush) {
  constexpr int kSize = 8192;
  auto sender = [&](Peer& peer) {
    void *comm, *mh, *request;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kSize);
    fillPattern(buffer.data(), kSize, 60);
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), kSize, kTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm, *mh, *request;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kSize);
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), kSize, kTag, mh, &request));
    int size = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
    ASSERT_EQ(size, kSize);
    void* data = buffer.data();
    void* flush = reinterpret_cast<void*>(0x1);  // must be overwritten
    ASSERT_EQ(peer.net->iflush(comm, 1, &data, &size, &mh, &flush), abi::kSuccess);
    // NCCL's contract: a NULL request means "no flush needed"; host memory never needs one, so
    // a request here is a needless round trip on every receive.
    ASSERT_EQ(flush, nullptr) << "iflush of host memory returned a request (or left it unset)";
    EXPECT_TRUE(verifyPattern(buffer.data(), kSize, 60));
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver);
}

}  // namespace
}  // namespace nnf::test
