// Soak: many messages of random sizes (0 to 1 MiB, zero-byte ones included) over several comm
// pairs driven by several threads in each of two processes, as NCCL's proxy threads do. Every
// byte of every message is checked against a pattern unique to the message (a stronger check
// than a checksum: it also names the first wrong byte).
//
//   default (CI):            NNF_SOAK_MESSAGES=2000 in all, a few seconds per provider
//   long:                    cmake -DNNF_SOAK_LONG=ON, then ctest -L soak (10^6 per provider)
//   by hand:                 NNF_SOAK_MESSAGES=50000 NNF_SOAK_THREADS=8 ./soak_test
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"

namespace nnf::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxSize = 1 << 20;
constexpr int kWindow = 4;
constexpr int kTags = 3;  // several NCCL tags per comm: matching is per tag and posting order

int envInt(const char* name, int fallback) {
  const char* text = getenv(name);
  return text != nullptr && atoi(text) > 0 ? atoi(text) : fallback;
}

// Message `i` of thread `t`: its size and pattern id, the same on both sides. Half the sizes are
// uniform over 0..1 MiB, half log-uniform (small messages dominate real NCCL traffic).
int messageSize(int thread, int i) {
  std::mt19937_64 random((static_cast<uint64_t>(thread) << 32) ^ static_cast<uint64_t>(i) ^ 0x5eed);
  if (random() % 2 == 0) return static_cast<int>(random() % (kMaxSize + 1));
  int bits = static_cast<int>(random() % 21);  // 2^0 .. 2^20
  int size = static_cast<int>(random() % ((1u << bits) + 1));
  return size > kMaxSize ? kMaxSize : size;
}
uint64_t messageId(int thread, int i) {
  return (static_cast<uint64_t>(thread + 1) << 32) | i;
}
int messageTag(int i) {
  return 0x500 + i % kTags;
}

struct ThreadStats {
  int completed = 0;
  uint64_t bytes = 0;
  int zeroByte = 0;
};

// One thread's stream on its own comm: a window of posted buffers, tested in any order.
void runStream(Peer& peer, void* comm, bool sender, int thread, int total, ThreadStats* stats) {
  SCOPED_TRACE("thread " + std::to_string(thread));
  std::vector<std::unique_ptr<HostBuffer>> buffers;
  std::vector<void*> mhandles(kWindow, nullptr), requests(kWindow, nullptr);
  std::vector<int> index(kWindow, -1);
  for (int i = 0; i < kWindow; ++i) {
    buffers.push_back(std::make_unique<HostBuffer>(kMaxSize));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffers[i]->data(), kMaxSize, &mhandles[i]));
  }
  int posted = 0;
  // Generous: a loaded 2-core machine runs the sanitizer builds of this too.
  Deadline deadline(60 + total / 50.0);
  while (stats->completed < total) {
    ASSERT_FALSE(deadline.expired()) << stats->completed << " of " << total << " done";
    for (int slot = 0; slot < kWindow; ++slot) {
      if (requests[slot] == nullptr) {
        // Post in message order only: the slot with the next message gets it.
        if (posted >= total) continue;
        int size = messageSize(thread, posted);
        int tag = messageTag(posted);
        uint8_t* data = buffers[slot]->data();
        if (sender) {
          fillPattern(data, size, messageId(thread, posted));
          ASSERT_EQ(peer.net->isend(comm, data, size, tag, mhandles[slot], &requests[slot]),
                    abi::kSuccess);
        } else {
          // The receive is posted at full size: the real size comes back from test.
          void* buffer = data;
          int capacity = kMaxSize;
          ASSERT_EQ(
              peer.net->irecv(comm, 1, &buffer, &capacity, &tag, &mhandles[slot], &requests[slot]),
              abi::kSuccess);
        }
        if (requests[slot] != nullptr) index[slot] = posted++;
        continue;
      }
      int done = 0, size = -1;
      ASSERT_EQ(peer.net->test(requests[slot], &done, &size), abi::kSuccess)
          << "message " << index[slot];
      if (!done) continue;
      requests[slot] = nullptr;
      int expected = messageSize(thread, index[slot]);
      if (!sender) {
        ASSERT_EQ(size, expected) << "message " << index[slot];
        ASSERT_TRUE(verifyPattern(buffers[slot]->data(), size, messageId(thread, index[slot])))
            << "message " << index[slot] << " of thread " << thread;
      }
      ++stats->completed;
      stats->bytes += static_cast<uint64_t>(expected);
      if (expected == 0) ++stats->zeroByte;
    }
  }
  for (void* mh : mhandles) dereg(peer, comm, mh);
}

void soak(int total, int threads) {
  const int perThread = (total + threads - 1) / threads;
  auto side = [&](Peer& peer, bool sender) {
    // Connections are made one after the other on the main thread (the channel is one stream);
    // the traffic then runs on all threads at once.
    std::vector<void*> comms(threads, nullptr), listens(threads, nullptr);
    for (int t = 0; t < threads; ++t) {
      if (sender) {
        ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comms[t]));
      } else {
        ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listens[t], &comms[t]));
      }
    }
    std::vector<ThreadStats> stats(threads);
    std::vector<std::thread> workers;
    auto start = Clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { runStream(peer, comms[t], sender, t, perThread, &stats[t]); });
    }
    for (std::thread& worker : workers) worker.join();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    ThreadStats sum;
    for (const ThreadStats& s : stats) {
      sum.completed += s.completed;
      sum.bytes += s.bytes;
      sum.zeroByte += s.zeroByte;
    }
    fprintf(stderr, "[soak %s] %d messages (%d of zero bytes), %.1f MiB in %.1f s on %d threads\n",
            peer.role.c_str(), sum.completed, sum.zeroByte, sum.bytes / 1048576.0, seconds,
            threads);
    EXPECT_EQ(sum.completed, perThread * threads);
    // The receiver has everything before the sender closes.
    if (sender) {
      ASSERT_TRUE(peer.channel->wait(120));
      for (void* comm : comms) closeSend(peer, comm);
    } else {
      ASSERT_TRUE(peer.channel->signal());
      for (int t = 0; t < threads; ++t) {
        closeRecv(peer, comms[t]);
        closeListen(peer, listens[t]);
      }
    }
    EXPECT_EQ(peer.warnings(), 0);
  };
  double timeout = 120 + total / 200.0;
  runTwoProcesses([&](Peer& peer) { side(peer, true); }, [&](Peer& peer) { side(peer, false); },
                  timeout);
}

// The short soak: every CI run. NNF_SOAK_MESSAGES makes it the long one.
TEST(Soak, RandomSizesManyThreadsEveryByteChecked) {
  soak(envInt("NNF_SOAK_MESSAGES", 2000), envInt("NNF_SOAK_THREADS", 4));
}

}  // namespace
}  // namespace nnf::test
