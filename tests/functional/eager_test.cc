// The rdma protocol's eager path (src/protocol/rdma_eager.h): a small send whose receive is not
// posted yet goes at once into one of the receiver's 64 bounce entries and completes; the 65th
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
#include "support/known_failures.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x61;
constexpr int kWarmTag = 0x62;
constexpr int kEntries = 64;  // the receiver's bounce entries (rdma::kEagerEntries)
// The default NCCL_FABRIC_EAGER_MAX: 8 KiB on tcp and efa; shm's inject size (4 KiB), since shm
// completes larger writes only once their target progresses (the header goes ahead of the
// message there, in a write of its own).
int eagerMax() {
  return testProvider() == "shm" ? 4096 : 8192;
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

TEST(Eager, AsManySendsAsBounceEntriesCompleteBeforeAnyReceiveAndTheNextWaitsForOne) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  const int most = eagerMax();
  const int pattern[] = {1, 8,  100, most - 1, most, most / 2, 4000,       3,
                         0, 64, 512, 2048,     3000, most - 7, most - 100, 16};
  std::vector<int> sizes;
  for (int i = 0; i <= kEntries; ++i) sizes.push_back(pattern[i % 16]);
  sizes.back() = most;
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
        << "sends of up to the eager size did not complete before their receives were posted";
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));  // the receiver may post
    uint8_t* last = buffer.data() + kEntries * kSlotBytes;
    fillPattern(last, static_cast<size_t>(sizes[kEntries]), 100 + kEntries);
    void* waiting;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, last, sizes[kEntries], kTag, mh, &waiting));
    std::vector<void*> seventeenth{waiting};
    EXPECT_FALSE(allDoneWithin(peer, seventeenth, 0.3))
        << "a send completed while all " << kEntries << " bounce entries were held";
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

// The sender may have one eager message in flight per entry the receiver freed, and no more:
// with every entry held, entries freed out of eager order return no credit (entry 0 still holds
// its message), and entries freed in order return exactly their count. A sender one credit ahead
// writes into an entry whose message no receive has taken yet (the receiver drops it with a
// WARN). Messages 0..7 go on tag A, the others on tag B, so that the receiver can free entries
// 8..15 before 0..7.
TEST(Eager, TheSenderNeverGoesBeyondTheEntriesTheReceiverFreed) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kTagA = kTag, kTagB = kTag + 2;  // kTag + 1 is kWarmTag
  constexpr int kBatch = 8;  // rdma::kCreditBatch: entries freed per credit write
  // Messages: 0..63 fill every entry; 64 tries while only out-of-order frees were made; 65..79
  // use the 16 credits of the in-order frees with 64; 80 tries one beyond them.
  constexpr int kOutOfOrderTry = kEntries, kBeyond = kEntries + 2 * kBatch, kMessages = kBeyond + 1;
  const int most = eagerMax();
  std::vector<int> sizes;
  for (int i = 0; i < kMessages; ++i) sizes.push_back((i * 997 + 13) % (most + 1));
  auto tagOf = [](int message) { return message < kBatch ? kTagA : kTagB; };
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{kMessages} * kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    // Sends message m; its request joins `requests` (allDoneWithin clears the completed ones).
    auto send = [&](int m, std::vector<void*>* requests) {
      uint8_t* data = buffer.data() + size_t{kSlotBytes} * m;
      fillPattern(data, static_cast<size_t>(sizes[m]), 500 + m);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizes[m], tagOf(m), mh, &request));
      requests->push_back(request);
    };
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    letTheReceiverGoQuiet();
    std::vector<void*> full;
    for (int m = 0; m < kEntries; ++m) ASSERT_NO_FATAL_FAILURE(send(m, &full));
    ASSERT_TRUE(allDoneWithin(peer, full, 20)) << "the first " << kEntries << " sends did not go "
                                               << "eagerly into the receiver's entries";
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));  // the receiver may post
    ASSERT_TRUE(peer.channel->wait(60));  // entries 8..15 freed, out of eager order
    std::vector<void*> credited, beyond;
    ASSERT_NO_FATAL_FAILURE(send(kOutOfOrderTry, &credited));
    EXPECT_FALSE(allDoneWithin(peer, credited, 0.5))
        << "a send completed while entry 0 was still held: entries freed out of eager order "
           "were returned as credits";
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_TRUE(peer.channel->wait(60));  // entries 0..7 freed too: 16 in eager order
    for (int m = kOutOfOrderTry + 1; m < kBeyond; ++m) ASSERT_NO_FATAL_FAILURE(send(m, &credited));
    EXPECT_TRUE(allDoneWithin(peer, credited, 20))
        << "the " << 2 * kBatch << " entries freed in eager order did not carry as many sends";
    ASSERT_NO_FATAL_FAILURE(send(kBeyond, &beyond));
    EXPECT_FALSE(allDoneWithin(peer, beyond, 0.5))
        << "a send completed beyond the " << 2 * kBatch << " entries the receiver freed";
    ASSERT_TRUE(peer.channel->signal());  // the receiver takes every message now
    for (std::vector<void*>* left : {&credited, &beyond}) {
      for (void* request : *left) {
        if (request != nullptr) {
          ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
        }
      }
    }
    ASSERT_TRUE(peer.channel->wait(60));
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(size_t{kMessages} * kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    // Progress meanwhile (shm completes a write once its target progresses); the sender sends
    // this once every entry is full.
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    fillSentinel(buffer.data(), buffer.size());
    int warningsBefore = peer.warnings();
    auto receive = [&](int m) {
      SCOPED_TRACE("message " + std::to_string(m) + " of " + std::to_string(sizes[m]) + " B");
      uint8_t* data = buffer.data() + size_t{kSlotBytes} * m;
      void* request;
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, data, static_cast<int>(kSlotBytes / 2), tagOf(m), mh, &request));
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
      EXPECT_EQ(size, sizes[m]);
      EXPECT_TRUE(verifyPattern(data, static_cast<size_t>(sizes[m]), 500 + m));
      EXPECT_TRUE(verifySentinel(data + sizes[m], kSlotBytes - static_cast<size_t>(sizes[m])))
          << "bytes written past the message";
    };
    for (int m = kBatch; m < 2 * kBatch; ++m) ASSERT_NO_FATAL_FAILURE(receive(m));
    {
      Progressor progressor(peer);  // the sender's writes may need their target to progress
      ASSERT_TRUE(peer.channel->signal());
      ASSERT_TRUE(peer.channel->wait(60));
    }
    for (int m = 0; m < kBatch; ++m) ASSERT_NO_FATAL_FAILURE(receive(m));
    {
      Progressor progressor(peer);
      ASSERT_TRUE(peer.channel->signal());
      ASSERT_TRUE(peer.channel->wait(60));
    }
    for (int m = 2 * kBatch; m < kMessages; ++m) ASSERT_NO_FATAL_FAILURE(receive(m));
    EXPECT_EQ(peer.warnings(), warningsBefore)
        << "the receiver dropped a message written into an entry it still held";
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 180);
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
// starts (the sender then waits `senderDelay(m)` more before message m). `before` runs in the
// receiver ahead of the first receive, `mark` ahead of receive `markAt`, `after` once the last
// one has landed.
void receivesPostedFirst(int messages, int size,
                         const std::function<std::chrono::milliseconds(int)>& senderDelay,
                         const std::function<void(Peer&)>& before, int markAt,
                         const std::function<void(Peer&)>& mark,
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
      std::this_thread::sleep_for(senderDelay(m));
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
      if (m == markAt) mark(peer);
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

void receivesPostedFirst(int messages, int size, std::chrono::milliseconds senderDelay,
                         const std::function<void(Peer&)>& before,
                         const std::function<void(Peer&)>& after) {
  receivesPostedFirst(
      messages, size, [senderDelay](int) { return senderDelay; }, before, -1, [](Peer&) {}, after);
}

bool saidAtInfo(Peer& peer, const std::string& text) {
  for (const std::string& line : peer.infoTexts()) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
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
  NNF_SKIP_KNOWN_FAILURE();
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

// A sender stalled (descheduled, busy elsewhere) for 20 ms before each of 12 messages: every
// undescribed receive is described late, yet that changes nothing for later receives. Once the
// sender is back to speed the small receives go undescribed again at once: on the EFA-rules
// provider the receiver writes less than a quarter of a descriptor a message from the 25th
// message on. Before, 4 late descriptions in a row made the comm describe every receive for
// good (it said so at INFO, and wrote a descriptor a message).
TEST(Eager, ASenderStalledPastTheLateDescriptionTimeLeavesSmallReceivesUndescribed) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kStalled = 12, kSettled = 24, kMessages = 224;
  uint64_t before = 0;
  bool counted = false;
  receivesPostedFirst(
      kMessages, 64, [](int m) { return std::chrono::milliseconds(m < kStalled ? 20 : 0); },
      // Not on softefa, as above: its device's thread may take a busy machine's 1 ms.
      [](Peer&) {}, kSettled,
      [&](Peer&) { counted = !onSoftEfa() && efaRulesWrittenHere(&before); },
      [&](Peer& peer) {
        EXPECT_FALSE(saidAtInfo(peer, "every receive is described"))
            << "the late descriptions switched the comm to describing every receive";
        uint64_t after = 0;
        if (counted && efaRulesWrittenHere(&after)) {
          EXPECT_LT(after - before, uint64_t{kMessages - kSettled} * 64 / 4)
              << "the receiver still wrote a descriptor for its small receives";
        }
      });
}

// A sender that sends nothing eagerly (NCCL_FABRIC_EAGER_MAX=0 on its side only) says so in its
// answer to the grant (kEagerLimit): the receiver describes its small receives from then on,
// instead of leaving each undescribed for 1 ms (rdma::kLateDescribeNs) before describing it.
TEST(Eager, ASenderThatSendsNothingEagerlySaysSoAndItsReceivesAreDescribed) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  ScopedEnv env;
  env.set("NNF_TEST_ENV_SENDER", "NCCL_FABRIC_EAGER_MAX=0");
  receivesPostedFirst(
      20, 64, std::chrono::milliseconds(0), [](Peer&) {},
      [](Peer& peer) {
        EXPECT_TRUE(saidAtInfo(peer, "its sender sends messages up to 0 bytes eagerly"))
            << "the receiver did not hear that its sender sends nothing eagerly";
      });
}

// The shape from the sender's side: a window of 32 sends of 4 KiB (NCCL's most in flight
// on a comm) completes while the receiver process does nothing at all (descheduled, or busy
// elsewhere), so that on a busy machine the sender does not wait a scheduler slice for the
// receiver every few messages. Before, 4 KiB was 16 bytes over shm's eager size (its header
// included), and only 16 bounce entries were granted on tcp and efa.
TEST(Eager, AWindowOf4KiBSendsCompletesWhileTheReceiverDoesNothing) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kWindow = 32, kSize = 4096;
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kWindow * kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    // The first message goes by descriptor; the receive for the second takes the bounce area,
    // grants it and says that small receives go undescribed.
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    ASSERT_TRUE(peer.channel->wait());  // the receiver does nothing from now on
    std::vector<void*> window;
    for (int i = 0; i < kWindow; ++i) {
      uint8_t* data = buffer.data() + i * kSize;
      fillPattern(data, kSize, 300 + i);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, kSize, kTag, mh, &request));
      window.push_back(request);
    }
    EXPECT_TRUE(allDoneWithin(peer, window, 20))
        << "a window of 4 KiB sends did not complete while the receiver did nothing";
    ASSERT_TRUE(peer.channel->signal());
    for (void* request : window) {
      if (request != nullptr) {
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
      }
    }
    ASSERT_TRUE(peer.channel->wait());
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    HostBuffer buffer(kWindow * kSize + kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    ASSERT_NO_FATAL_FAILURE(warmUpRecv(peer, comm, buffer.data(), mh));
    fillSentinel(buffer.data(), buffer.size());
    ASSERT_TRUE(peer.channel->signal());
    ASSERT_TRUE(peer.channel->wait(60));  // no call into the plugin meanwhile
    std::vector<void*> window(kWindow, nullptr);
    for (int i = 0; i < kWindow; ++i) {
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, buffer.data() + i * kSize, kSize, kTag, mh, &window[i]));
    }
    for (int i = 0; i < kWindow; ++i) {
      int size = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, window[i], &size));
      EXPECT_EQ(size, kSize);
      EXPECT_TRUE(verifyPattern(buffer.data() + i * kSize, kSize, 300 + i)) << "message " << i;
    }
    EXPECT_TRUE(verifySentinel(buffer.data() + kWindow * kSize, kSize));
    ASSERT_TRUE(peer.channel->signal());
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

// Sends and receives of messages[i] = (sizes[i], tags[i]), up to 8 of each side in flight, the
// receiver pausing at random so that receives are posted before, while and after their messages
// travel. Every message lands once, whole, in its own receive.
void raceMessages(const std::vector<int>& sizes, const std::vector<int>& tags) {
  constexpr int kWindow = 8;
  const int messages = static_cast<int>(sizes.size());
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(kWindow * kSlotBytes);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(warmUpSend(peer, comm, buffer.data(), mh));
    std::vector<void*> window(kWindow, nullptr);
    for (int i = 0; i < messages; ++i) {
      int at = i % kWindow;
      if (window[at] != nullptr) {
        ASSERT_NO_FATAL_FAILURE(waitDone(peer, window[at], nullptr));
      }
      uint8_t* data = buffer.data() + at * kSlotBytes;
      fillPattern(data, static_cast<size_t>(sizes[i]), 1000 + i);
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, sizes[i], tags[i], mh, &window[at]));
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
    for (int i = 0; i < messages; ++i) {
      int at = i % kWindow;
      if (window[at] != nullptr) check(i - kWindow);
      uint8_t* data = buffer.data() + at * kSlotBytes;
      fillSentinel(data, kSlotBytes);
      // Now and then longer than the sender's quiet time (1 ms), so that sends go eagerly
      // while receives are posted behind them.
      if (pauses() % 64 == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(pauses() % 3000));
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, data, static_cast<int>(kSlotBytes), tags[i], mh, &window[at]));
    }
    for (int i = messages - kWindow; i < messages; ++i) {
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

// Sends and receives on two tags, up to 8 of each side in flight, the receiver pausing at random
// so that receives are posted before, while and after their messages travel: eager messages
// meet described buffers (the sender answers those descriptors with voids), credits run out and
// come back, larger messages wait for their descriptors. Every message lands once, whole, in
// its own receive.
TEST(Eager, ReceivesRacingTheirMessagesGetEveryByteOnce) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kMessages = 3000;
  constexpr int kTags[2] = {kTag, kTag + 1};
  // Message i: its size, and the tag it goes with (each tag's messages in order).
  std::vector<int> sizes(kMessages);
  std::mt19937 random(20261201);
  for (int& size : sizes) {
    int pick = static_cast<int>(random() % 16);
    size = pick == 0 ? 12000 + static_cast<int>(random() % 4000)  // past the eager size
                     : static_cast<int>(random() % (eagerMax() + 1));
  }
  std::vector<int> tags;
  for (int i = 0; i < kMessages; ++i) tags.push_back(kTags[i % 2]);
  raceMessages(sizes, tags);
}

// Messages at the eager size and just under it, in runs of one tag then the other: on shm (4 KiB
// there) a message whose header does not fit its inline write goes without it when the
// receiver's last header had its tag (control 6), and with it when the tag changed.
TEST(Eager, MessagesAtTheEagerSizeOnTwoTagsGetEveryByteOnce) {
  if (skipUnlessRdma()) GTEST_SKIP() << "the eager path is the rdma protocol's";
  constexpr int kMessages = 1500;
  std::vector<int> sizes, tags;
  std::mt19937 random(28);
  int tag = kTag;
  for (int i = 0; i < kMessages; ++i) {
    if (random() % 4 == 0) tag = tag == kTag ? kTag + 1 : kTag;
    sizes.push_back(eagerMax() - static_cast<int>(random() % 24));
    tags.push_back(tag);
  }
  raceMessages(sizes, tags);
}

}  // namespace
}  // namespace nnf::test
