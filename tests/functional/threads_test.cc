// Several threads per process, each with its own comms, connecting and transferring at the same
// time: NCCL drives comms from several proxy threads at once.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"

namespace nnf::test {
namespace {

constexpr int kThreads = 4;
constexpr int kMessages = 96;
constexpr int kWindow = 8;
constexpr int kThreadSlot = 256 << 10;
constexpr int kTag = 0x77;

int threadSize(int thread, int k) {
  static const int kSizes[] = {0, 1, 4096, 65536, 200000, kThreadSlot};
  return kSizes[(k + thread) % 6];
}
uint64_t threadMessage(int thread, int k) {
  return 1000000 * (thread + 1) + k;
}

void sendThread(Peer& peer, Handle handle, int thread) {
  SCOPED_TRACE("thread " + std::to_string(thread));
  void *comm, *mh;
  ASSERT_NO_FATAL_FAILURE(connectTo(peer, &handle, &comm));
  HostBuffer buffer(size_t{kThreadSlot} * kWindow);
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
  for (int first = 0; first < kMessages; first += kWindow) {
    std::vector<void*> requests(kWindow);
    for (int i = 0; i < kWindow; ++i) {
      uint8_t* slot = buffer.data() + size_t{kThreadSlot} * i;
      int k = first + i;
      fillPattern(slot, threadSize(thread, k), threadMessage(thread, k));
      ASSERT_NO_FATAL_FAILURE(
          postSend(peer, comm, slot, threadSize(thread, k), kTag, mh, &requests[i]));
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
  }
  dereg(peer, comm, mh);
  closeSend(peer, comm);
}

void recvThread(Peer& peer, void* listen, int thread) {
  SCOPED_TRACE("thread " + std::to_string(thread));
  void *comm, *mh;
  ASSERT_NO_FATAL_FAILURE(acceptOn(peer, listen, &comm));
  HostBuffer buffer(size_t{kThreadSlot} * kWindow);
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
  for (int first = 0; first < kMessages; first += kWindow) {
    fillSentinel(buffer.data(), buffer.size());
    std::vector<void*> requests(kWindow);
    for (int i = 0; i < kWindow; ++i)
      ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data() + size_t{kThreadSlot} * i,
                                       kThreadSlot, kTag, mh, &requests[i]));
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    for (int i = 0; i < kWindow; ++i) {
      int k = first + i;
      const uint8_t* slot = buffer.data() + size_t{kThreadSlot} * i;
      EXPECT_EQ(sizes[i], threadSize(thread, k)) << "message " << k;
      EXPECT_TRUE(verifyPattern(slot, threadSize(thread, k), threadMessage(thread, k)))
          << "message " << k;
      EXPECT_TRUE(verifySentinel(slot + threadSize(thread, k), kThreadSlot - threadSize(thread, k)))
          << "message " << k;
    }
  }
  dereg(peer, comm, mh);
  closeRecv(peer, comm);
}

TEST(Threads, FourThreadsEachWithTheirOwnCommsAtOnce) {
  auto sender = [&](Peer& peer) {
    std::vector<Handle> handles(kThreads);
    for (Handle& handle : handles) ASSERT_TRUE(peer.channel->recv(handle.bytes, sizeof(handle)));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&peer, &handles, t] { sendThread(peer, handles[t], t); });
    for (std::thread& thread : threads) thread.join();
  };
  auto receiver = [&](Peer& peer) {
    std::vector<void*> listens(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      Handle handle;
      ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, &listens[t]));
      ASSERT_TRUE(peer.channel->send(handle.bytes, sizeof(handle)));
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&peer, &listens, t] { recvThread(peer, listens[t], t); });
    for (std::thread& thread : threads) thread.join();
    for (void* listen : listens) closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 90);
}

TEST(Threads, ConnectAndAcceptFromManyThreadsInOneProcess) {
  // Both ends in one process, each thread running its own connect/accept/transfer/close cycle:
  // the shared endpoint and connection tables see concurrent set-up and tear-down.
  runOneProcess(
      [](Peer& peer) {
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t)
          threads.emplace_back([&peer, t] {
            SCOPED_TRACE("thread " + std::to_string(t));
            for (int round = 0; round < 10; ++round) {
              const int size = 1000 * (round + 1) + t;
              Handle handle;
              void *listen, *send, *recv, *sendMh, *recvMh, *sendReq, *recvReq;
              ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, &listen));
              ASSERT_NO_FATAL_FAILURE(connectLocal(peer, listen, &handle, &send, &recv));
              HostBuffer in(size), out(size);
              fillPattern(out.data(), size, threadMessage(t, round));
              ASSERT_NO_FATAL_FAILURE(regHost(peer, send, out.data(), size, &sendMh));
              ASSERT_NO_FATAL_FAILURE(regHost(peer, recv, in.data(), size, &recvMh));
              ASSERT_NO_FATAL_FAILURE(
                  postRecv(peer, recv, in.data(), size, kTag, recvMh, &recvReq));
              ASSERT_NO_FATAL_FAILURE(
                  postSend(peer, send, out.data(), size, kTag, sendMh, &sendReq));
              std::vector<int> sizes;
              ASSERT_NO_FATAL_FAILURE(waitAll(peer, {recvReq, sendReq}, &sizes));
              EXPECT_EQ(sizes[0], size);
              EXPECT_TRUE(verifyPattern(in.data(), size, threadMessage(t, round)));
              dereg(peer, send, sendMh);
              dereg(peer, recv, recvMh);
              closeSend(peer, send);
              closeRecv(peer, recv);
              closeListen(peer, listen);
            }
          });
        for (std::thread& thread : threads) thread.join();
      },
      90);
}

}  // namespace
}  // namespace nnf::test
