// The rdma protocol's eager path (src/protocol/rdma_eager.h): a small send whose receive is not
// posted yet goes at once into one of the receiver's 16 bounce entries and completes; the 17th
// waits until receives free entries; receives posted later, or racing their messages, get every
// byte once; a too-large eager message fails its receive and the comm goes on. Runs on the rdma
// suites (shm, tcp, the EFA-rules provider with reordered completions, two rails); skips elsewhere.
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x61;
constexpr int kWarmTag = 0x62;
constexpr int kEntries = 16;  // the receiver's bounce entries (rdma::kEagerEntries)
// The default NCCL_FABRIC_EAGER_MAX: 8 KiB on tcp and efa; shm's inject size (4 KiB) less the
// eager header, since shm completes larger writes only once their target progresses.
int eagerMax() {
  return testProvider() == "shm" ? 4096 - 16 : 8192;
}
constexpr size_t kSlotBytes = 16384;  // each message's own buffer region (and its tail)

bool skipUnlessRdma() {
  return testProtocol() != "rdma";
}

// One message before the test proper: the receiver grants its bounce entries once its first
// message has landed (the first always goes by descriptor), so that later sends may go eagerly.
void warmUpSend(Peer& peer, void* comm, uint8_t* buffer, void* mh) {
  void* request;
  ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer, 8, kWarmTag, mh, &request));
  ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
}
// Sends go eagerly only while the receiver is quiet (no descriptor for 1 ms, rdma::
// kEagerQuietNs) or after it said that its small receives go undescribed (kEagerAhead): the
// tests make the receiver quiet before the sends they expect to go eagerly.
void letTheReceiverGoQuiet() {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}
void warmUpRecv(Peer& peer, void* comm, uint8_t* buffer, void* mh) {
  void* request;
  ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer, 8, kWarmTag, mh, &request));
  ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
}

// Polls every request until all are done or `seconds` pass; true when all completed.
bool allDoneWithin(Peer& peer, std::vector<void*>& requests, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  size_t left = requests.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (void*& request : requests) {
      if (request == nullptr) continue;
      int done = 0;
      int size = 0;
      EXPECT_EQ(peer.net->test(request, &done, &size), abi::kSuccess);
      if (done != 0) {
        request = nullptr;
        --left;
      }
    }
  }
  return left == 0;
}

TEST(Eager, SixteenSendsCompleteBeforeAnyReceiveAndTheSeventeenthWaitsForOne) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  const int most = eagerMax();
  const std::vector<int> sizes = {1,  8,   100,  most - 1, most,     most / 2,   4000, 3,   0,
                                  64, 512, 2048, 3000,     most - 7, most - 100, 16,   most};
  ASSERT_EQ(static_cast<int>(sizes.size()), kEntries + 1);
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(sizes.size() * kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    letTheReceiverGoQuiet();
    std::vector<void*> eager;
    for (int i = 0; i < kEntries; ++i) {
      uint8_t* data = buffer.data() + i * kSlotBytes;
      fillPattern(data, static_cast<size_t>(sizes[i]), 100 + i);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizes[i], kTag, mh, &request));
      eager.push_back(request);
    }
    EXPECT_TRUE(allDoneWithin(peer, eager, 20))
        << "sends of up to 8 KiB did not complete before their receives were posted";
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));  // the receiver may post
    uint8_t* last = buffer.data() + kEntries * kSlotBytes;
    fillPattern(last, static_cast<size_t>(sizes[kEntries]), 100 + kEntries);
    void* waiting;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, last, sizes[kEntries], kTag, mh, &waiting));
    std::vector<void*> seventeenth{waiting};
    EXPECT_FALSE(allDoneWithin(peer, seventeenth, 0.3))
        << "a 17th send completed while all 16 bounce entries were held";
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, seventeenth[0], nullptr));
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(sizes.size() * kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    fillSentinel(buffer.data(), buffer.size());
    // Progress without a receive of the test's tag (as NCCL's proxy does, testing other
    // requests): some providers (shm) complete a write only once its target progresses. The
    // sender sends this once its eager sends have completed.
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    fillSentinel(buffer.data(), 8);
    ASSERT_TRUE(peer.channel->wait(60));  // the 17th send is waiting
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " B");
      uint8_t* data = buffer.data() + i * kSlotBytes;
      void* request;
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, data, static_cast<int>(kSlotBytes / 2), kTag, mh, &request));
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
      EXPECT_EQ(size, sizes[i]);
      EXPECT_TRUE(verifyPattern(data, static_cast<size_t>(sizes[i]), 100 + i));
      EXPECT_TRUE(verifySentinel(data + sizes[i], kSlotBytes - static_cast<size_t>(sizes[i])))
          << "bytes written past the message";
    }
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

TEST(Eager, ATooLargeEagerMessageFailsItsReceiveAndTheCommGoesOn) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kLarge = 100, kSmall = 10, kNext = 50;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(4096);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    letTheReceiverGoQuiet();
    fillPattern(buffer.data(), kLarge, 7);
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), kLarge, kTag, mh, &request));
    std::vector<void*> one{request};
    // Eager: the sender cannot know the receive's size, so its send succeeds.
    EXPECT_TRUE(allDoneWithin(peer, one, 20)) << "the eager send did not complete";
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    ASSERT_TRUE(peer.channel->wait());  // the receiver saw the truncation
    fillPattern(buffer.data(), kNext, 8);
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), kNext, kTag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(4096);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));  // progress meanwhile
    fillSentinel(buffer.data(), buffer.size());
    int before = peer.warnings();
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), kSmall, kTag, mh, &request));
    Outcome outcome = pollRequest(peer, request, nullptr);
    EXPECT_FALSE(outcome.timedOut);
    EXPECT_EQ(outcome.result, abi::kInternalError) << "a truncated receive is a usage error";
    EXPECT_EQ(peer.warnings() - before, 1) << "one WARN for the truncation";
    EXPECT_TRUE(verifySentinel(buffer.data(), buffer.size())) << "the receive buffer was written";
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), kSmall * 100, kTag, mh, &request));
    int size = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
    EXPECT_EQ(size, kNext);
    EXPECT_TRUE(verifyPattern(buffer.data(), kNext, 8));
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

// `messages` messages of `size` bytes, one at a time, each receive posted before its send
// starts (the sender then waits `senderDelay` more). `before` runs in the receiver ahead of the
// first receive, `after` once the last one has landed.
void receivesPostedFirst(int messages, int size, std::chrono::milliseconds senderDelay,
                         const std::function<void(Peer&)>& before,
                         const std::function<void(Peer&)>& after) {
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(4096);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    for (int m = 0; m < messages; ++m) {
      ASSERT_TRUE(peer.channel->wait());  // the receive is posted
      std::this_thread::sleep_for(senderDelay);
      fillPattern(buffer.data(), static_cast<size_t>(size), m);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), size, kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
    }
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    before(peer);
    for (int m = 0; m < messages; ++m) {
      fillSentinel(buffer.data(), buffer.size());
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), size, kTag, mh, &request));
      ASSERT_TRUE(peer.channel->signal());
      int got = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &got));
      ASSERT_EQ(got, size) << "message " << m;
      ASSERT_TRUE(verifyPattern(buffer.data(), static_cast<size_t>(size), m)) << "message " << m;
      ASSERT_TRUE(verifySentinel(buffer.data() + size, buffer.size() - static_cast<size_t>(size)))
          << "message " << m;
    }
    after(peer);
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

// A receive no larger than an eager entry, posted before its message, is not described (the
// first one after the grant is, and tells the sender so): the message fills it eagerly, one
// write instead of two. On the EFA-rules provider the receiver's RMA bytes show it: a
// descriptor is 64 bytes a message, credits 32 bytes every 8 messages.
TEST(Eager, SmallReceivesPostedFirstAreFilledWithoutADescriptor) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kMessages = 200;
  uint64_t before = 0;
  bool counted = false;
  receivesPostedFirst(
      kMessages, 64, std::chrono::milliseconds(0),
      // Not on softefa: there a message that takes the device's thread more than 1 ms (a busy
      // machine) has its receive described late, by design, and the count says nothing.
      [&](Peer&) { counted = !onSoftEfa() && efaRulesWrittenHere(&before); },
      [&](Peer&) {
        uint64_t after = 0;
        if (counted && efaRulesWrittenHere(&after)) {
          EXPECT_LT(after - before, uint64_t{kMessages} * 64 / 4)
              << "the receiver wrote a descriptor for its small receives";
        }
      });
}

// An undescribed small receive whose message is larger than an eager entry: nothing fills it
// eagerly, so it is described after 1 ms (rdma::kLateDescribeNs), and the send fails at the
// sender before a byte moves, as every truncation on rdma does. The comm goes on.
TEST(Eager, ALargerSendIntoAnUndescribedReceiveFailsAtTheSender) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kSmall = 64, kLarge = 64 << 10, kNext = 50;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kLarge);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    void* request;
    for (int size : {kSmall, kLarge, kNext}) {
      ASSERT_TRUE(peer.channel->wait());  // the receive is posted
      fillPattern(buffer.data(), static_cast<size_t>(size), size);
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), size, kTag, mh, &request));
      Outcome outcome = pollRequest(peer, request, nullptr);
      ASSERT_FALSE(outcome.timedOut) << "the send of " << size << " bytes hangs";
      EXPECT_EQ(outcome.result, size == kLarge ? abi::kInternalError : abi::kSuccess)
          << "the send of " << size << " bytes";
    }
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    for (int size : {kSmall, kLarge, kNext}) {
      fillSentinel(buffer.data(), buffer.size());
      int before = peer.warnings();
      void* request;
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), kSmall, kTag, mh, &request));
      ASSERT_TRUE(peer.channel->signal());
      int got = -1;
      Outcome outcome = pollRequest(peer, request, &got);
      ASSERT_FALSE(outcome.timedOut) << "the receive for " << size << " bytes hangs";
      if (size == kLarge) {
        EXPECT_EQ(outcome.result, abi::kInternalError) << "a truncated receive is a usage error";
        EXPECT_EQ(peer.warnings() - before, 1) << "one WARN for the truncation";
        EXPECT_TRUE(verifySentinel(buffer.data(), buffer.size())) << "the buffer was written";
      } else {
        EXPECT_EQ(outcome.result, abi::kSuccess);
        EXPECT_EQ(got, size);
        EXPECT_TRUE(verifyPattern(buffer.data(), static_cast<size_t>(size), size));
      }
    }
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

// A sender slower than the late-description time (20 ms after each receive is posted): every
// undescribed receive is described late before its message comes (which, sent before the
// sender read that descriptor, may still cross it eagerly), so after 4 in a row (rdma::
// kLateDescribesToGiveUp) the receiver describes every receive, and says so at INFO.
TEST(Eager, ASenderThatNeverGoesEagerlyEndsTheUndescribedReceives) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  receivesPostedFirst(
      12, 64, std::chrono::milliseconds(20), [](Peer&) {},
      [](Peer& peer) {
        bool said = false;
        for (const std::string& line : peer.infoTexts()) {
          said |= line.find("every receive is described from now on") != std::string::npos;
        }
        EXPECT_TRUE(said) << "the receiver kept leaving its receives undescribed";
      });
}

// Sends and receives on two tags, up to 8 of each side in flight, the receiver pausing at random
// so that receives are posted before, while and after their messages travel: eager messages
// meet described buffers (the sender answers those descriptors with voids), credits run out and
// come back, larger messages wait for their descriptors. Every message lands once, whole, in
// its own receive.
TEST(Eager, ReceivesRacingTheirMessagesGetEveryByteOnce) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kMessages = 3000;
  constexpr int kWindow = 8;
  constexpr int kTags[2] = {kTag, kTag + 1};
  // Message i: its size, and the tag it goes with (each tag's messages in order).
  std::vector<int> sizes(kMessages);
  std::mt19937 random(20261201);
  for (int& size : sizes) {
    int pick = static_cast<int>(random() % 16);
    size = pick == 0 ? 12000 + static_cast<int>(random() % 4000)  // past the eager size
                     : static_cast<int>(random() % (eagerMax() + 1));
  }
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kWindow * kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    std::vector<void*> window(kWindow, nullptr);
    for (int i = 0; i < kMessages; ++i) {
      int at = i % kWindow;
      if (window[at] != nullptr) {
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, window[at], nullptr));
      }
      uint8_t* data = buffer.data() + at * kSlotBytes;
      fillPattern(data, static_cast<size_t>(sizes[i]), 1000 + i);
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizes[i], kTags[i % 2], mh, &window[at]));
    }
    for (void* request : window) {
      if (request != nullptr) {
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
      }
    }
    ASSERT_TRUE(peer.channel->wait(120));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kWindow * kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    std::mt19937 pauses(7);
    std::vector<void*> window(kWindow, nullptr);
    int mismatched = 0;
    auto check = [&](int i) {
      int at = i % kWindow;
      int size = -1;
      waitDone(peer, window[at], &size);
      window[at] = nullptr;
      uint8_t* data = buffer.data() + at * kSlotBytes;
      bool good = size == sizes[i] && verifyPattern(data, static_cast<size_t>(size), 1000 + i) &&
                  verifySentinel(data + size, kSlotBytes - static_cast<size_t>(size));
      if (!good && ++mismatched <= 5) {
        ADD_FAILURE() << "message " << i << ": " << size << " B received, " << sizes[i]
                      << " B sent, or its bytes differ";
      }
    };
    for (int i = 0; i < kMessages; ++i) {
      int at = i % kWindow;
      if (window[at] != nullptr) check(i - kWindow);
      uint8_t* data = buffer.data() + at * kSlotBytes;
      fillSentinel(data, kSlotBytes);
      // Now and then longer than the sender's quiet time (1 ms), so that sends go eagerly
      // while receives are posted behind them.
      if (pauses() % 64 == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(pauses() % 3000));
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, data, static_cast<int>(kSlotBytes), kTags[i % 2], mh, &window[at]));
    }
    for (int i = kMessages - kWindow; i < kMessages; ++i) {
      if (window[i % kWindow] != nullptr) check(i);
    }
    EXPECT_EQ(mismatched, 0);
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 240);
}

}  // namespace
}  // namespace nnf::test
