// A sender that stops calling the plugin once its sends are done: what its provider still holds
// must reach the receiver all the same. NCCL's test of a send that went inline returns done at
// once, and a rank may not call that device again for a long time (it waits on another NIC's
// device, or in a barrier). But providers may keep such a send until the endpoint is progressed:
// efa when the target had no receive buffer (RNR: the packet is sent again from the sender's
// progress), tcp behind a transfer the socket has not finished. The device's keeper progresses it
// (docs/architecture.md, "The progress keeper").
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
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

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// 32 small messages (NCCL's requests in flight on a comm) into a receiver that is stopped while
// they go, with room for 16 packets at its NIC (FI_EFA_RX_SIZE): on efa the other 16 find no
// receive buffer and come back to the sender as RNR. The sender's sends end, it continues the
// receiver and never calls the plugin again; the receiver must get every message, whole.
TEST(QuietSender, SmallSendsReachAReceiverThatWasNotReadyAfterTheSenderStopsCalling) {
  constexpr int kMessages = 32;
  constexpr int kSize = 16;
  ScopedEnv env;
  env.set("NNF_TEST_ENV_RECEIVER", "FI_EFA_RX_SIZE=16");
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    std::vector<uint8_t> out(kMessages * kSize);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, out.data(), out.size(), &mh));
    pid_t receiverPid = 0;
    ASSERT_TRUE(peer.channel->recvValue(&receiverPid));
    ASSERT_TRUE(waitUntilStopped(receiverPid)) << "the receiver did not stop";
    std::vector<void*> requests(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      fillPattern(out.data() + i * kSize, kSize, 700 + i);
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, comm, out.data() + i * kSize, kSize, i, mh, &requests[i]));
    }
    // NCCL tests each until done (a send that waits for the stopped receiver keeps it going).
    std::vector<bool> done(kMessages, false);
    int left = kMessages;
    bool continued = false;
    for (auto start = Clock::now(); left > 0 && msSince(start) < 30000;) {
      for (int i = 0; i < kMessages; ++i) {
        if (done[i]) continue;
        int finished = 0;
        ASSERT_EQ(peer.net->test(requests[i], &finished, nullptr), abi::kSuccess);
        if (finished != 0) {
          done[i] = true;
          --left;
        }
      }
      if (!continued && msSince(start) > 100) {  // sends that need the receiver: let it run
        ASSERT_EQ(kill(receiverPid, SIGCONT), 0);
        continued = true;
      }
    }
    ASSERT_EQ(left, 0) << "sends never ended";
    // Give what the provider refused time to come back as refused (RNR, after its retries).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!continued) {
      ASSERT_EQ(kill(receiverPid, SIGCONT), 0);
    }
    // From here on nothing of the plugin is called until the receiver has every message.
    ASSERT_TRUE(peer.channel->wait(60)) << "the receiver did not get every message";
    peer.channel->finishBarrier(60);
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    std::vector<uint8_t> in(kMessages * kSize, 0);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, in.data(), in.size(), &mh));
    std::vector<void*> requests(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, in.data() + i * kSize, kSize, i, mh,
                                       &requests[i]));
    }
    // The receives are described (rdma) before this process stops; nothing of it runs then.
    for (auto start = Clock::now(); msSince(start) < 100;) {
      int finished = 0;
      ASSERT_EQ(peer.net->test(requests[0], &finished, nullptr), abi::kSuccess);
      ASSERT_EQ(finished, 0);
    }
    ASSERT_TRUE(peer.channel->sendValue(getpid()));
    raise(SIGSTOP);
    std::vector<bool> done(kMessages, false);
    int left = kMessages;
    for (auto start = Clock::now(); left > 0 && msSince(start) < 10000;) {
      for (int i = 0; i < kMessages; ++i) {
        if (done[i]) continue;
        int finished = 0;
        int size = 0;
        ASSERT_EQ(peer.net->test(requests[i], &finished, &size), abi::kSuccess);
        if (finished == 0) continue;
        done[i] = true;
        --left;
        EXPECT_EQ(size, kSize);
        EXPECT_TRUE(verifyPattern(in.data() + i * kSize, kSize, 700 + i)) << "message " << i;
      }
    }
    ASSERT_EQ(left, 0) << left << " of " << kMessages
                       << " messages never arrived once the sender stopped calling";
    ASSERT_TRUE(peer.channel->signal());
    peer.channel->finishBarrier(60);
    dereg(peer, comm, mh);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 120);
}

}  // namespace
}  // namespace nnf::test
