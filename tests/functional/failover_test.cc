// A rail that fails, and what the plugin does about it (issue 27, docs/failover.md): the device
// names the broken NIC once, leaves it out of later messages, and every write that was on it and
// did not land goes again on a rail still up; a mended NIC rejoins. The NICs are those of the
// EFA-rules stand-in (efa+rdma+2rails, +4rails) or of the software EFA device under libfabric's
// real efa provider (softefa+rdma+2rails, +4rails); their links break and mend through the
// stand-ins' controls (a control file naming the NICs that are down, or a count of operations).
// Every byte of every message is checked. With one rail every test skips.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/gpu_buffer.h"
#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"
#include "support/rails.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x3C;
constexpr size_t kTail = 4096;  // bytes past each message checked for stray writes

// The link-control file of a test (NNF_EFA_RULES_FAIL_FILE, NNF_SOFT_EFA_FAIL_FILE): the NICs
// it names are down for both processes (the stand-ins read it at their next post, at most every
// millisecond). Removed with the test.
class LinkControl {
 public:
  explicit LinkControl(const std::string& name)
      : path_("/tmp/nnf-" + name + "-" + std::to_string(getpid())) {
    std::remove(path_.c_str());
    env_.set("NNF_EFA_RULES_FAIL_FILE", path_);
    env_.set("NNF_SOFT_EFA_FAIL_FILE", path_);
  }
  ~LinkControl() {
    std::remove(path_.c_str());
    for (long pid : perProcess_) std::remove((path_ + "." + std::to_string(pid)).c_str());
  }
  // Takes the links of `nics` down ("1", "1,2"), or mends every link ("").
  void setDown(const char* nics) {
    FILE* file = std::fopen((path_ + ".new").c_str(), "w");
    ASSERT_NE(file, nullptr);
    if (*nics != '\0') std::fprintf(file, "%s\n", nics);
    ASSERT_EQ(std::fclose(file), 0);
    ASSERT_EQ(std::rename((path_ + ".new").c_str(), path_.c_str()), 0);
  }
  // The same for process `pid` alone: its NICs as its peers see them (a peer host's NIC), while
  // the other processes keep theirs. Called in a forked child: its parent's copy removes nothing.
  void setDownFor(long pid, const char* nics) {
    const std::string path = path_ + "." + std::to_string(pid);
    FILE* file = std::fopen((path + ".new").c_str(), "w");
    ASSERT_NE(file, nullptr);
    if (*nics != '\0') std::fprintf(file, "%s\n", nics);
    ASSERT_EQ(std::fclose(file), 0);
    ASSERT_EQ(std::rename((path + ".new").c_str(), path.c_str()), 0);
    perProcess_.push_back(pid);
  }

 private:
  std::string path_;
  std::vector<long> perProcess_;
  ScopedEnv env_;
};

// Posts a receive for each of `count` messages in turn (message i has sizeOf(i) bytes and the
// pattern of i), each followed by a tail of sentinels, waits for all of them and checks every
// byte and the sizes test() reported.
void receiveEachAndVerify(Peer& peer, void* comm, int count,
                          const std::function<int(int)>& sizeOf) {
  std::vector<size_t> offsets(count + 1, 0);
  for (int i = 0; i < count; ++i) offsets[i + 1] = offsets[i] + sizeOf(i) + kTail;
  HostBuffer buffer(offsets[count]);
  memset(buffer.data(), 0xA5, buffer.size());
  void* mh;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
  std::vector<void*> requests(count);
  for (int i = 0; i < count; ++i) {
    ASSERT_NO_FATAL_FAILURE(
        postRecv(peer, comm, buffer.data() + offsets[i], sizeOf(i), kTag, mh, &requests[i]));
  }
  std::vector<int> got;
  ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &got));
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(sizeOf(i)) + " B");
    EXPECT_EQ(got[i], sizeOf(i));
    EXPECT_TRUE(verifyPattern(buffer.data() + offsets[i], sizeOf(i), i));
    EXPECT_TRUE(verifySentinel(buffer.data() + offsets[i] + sizeOf(i), kTail));
  }
  dereg(peer, comm, mh);
}

// Sends message `index` (`size` bytes of its pattern, from `data`) and waits until it completed,
// successfully.
void sendOneAndWait(Peer& peer, void* comm, uint8_t* data, int size, void* mh, int index) {
  fillPattern(data, size, index);
  void* request;
  ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, data, size, kTag, mh, &request));
  Outcome outcome = pollRequest(peer, request, nullptr);
  ASSERT_FALSE(outcome.timedOut) << "message " << index;
  EXPECT_EQ(outcome.result, abi::kSuccess) << "message " << index << " failed";
}

// Sends `windows` windows of `window` messages (message m: sizeOf(m) bytes of its pattern, from
// its own slot of `slotBytes`), each window posted whole and waited for, every send succeeding;
// `posted(w)`, where given, runs once window w is posted, before the wait.
void sendWindows(Peer& peer, void* comm, int windows, int window, size_t slotBytes,
                 const std::function<int(int)>& sizeOf,
                 const std::function<void(int)>& posted = nullptr) {
  HostBuffer buffer(slotBytes * window);
  void* mh;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
  for (int first = 0; first < windows * window; first += window) {
    std::vector<void*> requests;
    for (int m = first; m < first + window; ++m) {
      uint8_t* slot = buffer.data() + slotBytes * (m - first);
      fillPattern(slot, sizeOf(m), m);
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, slot, sizeOf(m), kTag, mh, &request));
      requests.push_back(request);
    }
    if (posted) {
      ASSERT_NO_FATAL_FAILURE(posted(first / window));
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
  }
  dereg(peer, comm, mh);
}

// Receives what sendWindows sends, a window's receives posted at once, and checks every byte,
// the sizes test() reported and the sentinels after each message.
void receiveWindowsAndVerify(Peer& peer, void* comm, int windows, int window, size_t slotBytes,
                             const std::function<int(int)>& sizeOf) {
  const size_t room = slotBytes + kTail;
  HostBuffer buffer(room * window);
  void* mh;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
  for (int first = 0; first < windows * window; first += window) {
    memset(buffer.data(), 0xA5, buffer.size());
    std::vector<void*> requests;
    for (int m = first; m < first + window; ++m) {
      void* request;
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, buffer.data() + room * (m - first), sizeOf(m), kTag, mh, &request));
      requests.push_back(request);
    }
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(peer, requests, &sizes));
    for (int m = first; m < first + window; ++m) {
      SCOPED_TRACE("message " + std::to_string(m));
      const uint8_t* slot = buffer.data() + room * (m - first);
      EXPECT_EQ(sizes[m - first], sizeOf(m));
      EXPECT_TRUE(verifyPattern(slot, sizeOf(m), m));
      EXPECT_TRUE(verifySentinel(slot + sizeOf(m), kTail));
    }
  }
  dereg(peer, comm, mh);
}

// Messages 0..count-1 (sizeOf(i) bytes of pattern i), one at a time, each waited for at both
// ends: `beforeSend(peer, i)` runs in the sender before message i, `senderDone` after the last
// message and `receiverDone` once every message was received and checked, each before its close.
void runOneAtATime(int count, const std::function<int(int)>& sizeOf,
                   const std::function<void(Peer&, int)>& beforeSend,
                   const std::function<void(Peer&)>& senderDone,
                   const std::function<void(Peer&)>& receiverDone) {
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    HostBuffer buffer(size_t{1} << 20);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    for (int i = 0; i < count; ++i) {
      ASSERT_NO_FATAL_FAILURE(beforeSend(peer, i));
      ASSERT_NO_FATAL_FAILURE(sendOneAndWait(peer, comm, buffer.data(), sizeOf(i), mh, i));
    }
    senderDone(peer);
    dereg(peer, comm, mh);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    ASSERT_NO_FATAL_FAILURE(receiveEachAndVerify(peer, comm, count, sizeOf));
    receiverDone(peer);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 180);
}

// Seconds until `happened()` holds, looked at every 5 ms. Only a hang is bounded (60 s): the
// machine's load sets the time, which callers print rather than assert.
double secondsUntil(const std::function<bool()>& happened) {
  auto start = std::chrono::steady_clock::now();
  while (!happened() && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The speed the device reports now: what communicators built from now on hear.
int reportedSpeed(Peer& peer) {
  abi::PropertiesV8 now{};
  EXPECT_EQ(peer.net->getProperties(peer.dev, &now), abi::kSuccess);
  return now.speed;
}

// Windows of messages from a connected sender to its receiver (sendWindows,
// receiveWindowsAndVerify); `senderDone` and `receiverDone` run after the last window, each
// before its close.
void runWindows(int windows, int window, size_t slotBytes, const std::function<int(int)>& sizeOf,
                const std::function<void(Peer&)>& senderDone,
                const std::function<void(Peer&)>& receiverDone,
                const std::function<void(int)>& posted = nullptr) {
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    ASSERT_NO_FATAL_FAILURE(sendWindows(peer, comm, windows, window, slotBytes, sizeOf, posted));
    senderDone(peer);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    ASSERT_NO_FATAL_FAILURE(
        receiveWindowsAndVerify(peer, comm, windows, window, slotBytes, sizeOf));
    receiverDone(peer);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 180);
}

// INFO lines of this process that contain `text`.
int infoLinesWith(Peer& peer, const std::string& text) {
  int count = 0;
  for (const std::string& line : peer.infoTexts()) count += line.find(text) != std::string::npos;
  return count;
}

// What the plugin said of its rails' failures, `broken` in the order they broke: the device names
// each once with the rails left, never blames a healthy leader, and no comm reports a failed
// write.
void expectRailWarnings(Peer& peer, const std::vector<int>& broken) {
  int leader = 0, failedWrites = 0;
  std::vector<int> named(broken.size(), 0);
  for (const std::string& text : peer.warningTexts()) {
    for (size_t k = 0; k < broken.size(); ++k) {
      const std::string rail =
          "rail " + std::to_string(broken[k]) + " (NIC " + efaRulesDomainName(broken[k]) + ")";
      if (text.find(rail) == std::string::npos) continue;
      ++named[k];
      const std::string left = "moves data on " + std::to_string(testRails() - 1 - int(k)) +
                               " of " + std::to_string(testRails()) + " rails";
      EXPECT_NE(text.find(left), std::string::npos) << text;
    }
    bool leaderBroke = std::find(broken.begin(), broken.end(), 0) != broken.end();
    leader += !leaderBroke && text.find("rail 0 (NIC") != std::string::npos;
    failedWrites +=
        text.find("failed:") != std::string::npos && text.find("on comm") != std::string::npos;
  }
  for (size_t k = 0; k < broken.size(); ++k)
    EXPECT_EQ(named[k], 1) << "rail " << broken[k] << " is named once";
  EXPECT_EQ(leader, 0) << "the healthy leader was blamed";
  EXPECT_EQ(failedWrites, 0) << "a write's failure reached its comm";
}

// Shares the receiver was asked about (written again, or found in a buffer that had ended).
int sharesAskedAbout(Peer& peer) {
  return infoLinesWith(peer, "the sender's write on rail");
}

int sharesWrittenAgain(Peer& peer) {
  int count = 0;
  for (const std::string& text : peer.infoTexts()) {
    count += text.find("its share is written again on another rail") != std::string::npos;
  }
  return count;
}

// A NIC whose link breaks in mid-stream (the stand-ins' link control file names it: its writes
// and those addressed to it fail with efa's "unreachable" or "unresponsive remote"). The device
// names it once and leaves it out of later messages (striped over the rails left, or whole on
// one of them in turn), `getProperties` reports the speed left, and the message that had a share
// on it when it broke loses nothing: the sender asks the receiver about that share and writes it
// again on the rail left. Messages of three sizes in turn (two whole on one rail, one striped),
// each waited for before the next is posted. The messages whole on one rail take the rails in
// turn, so the 1 KiB ones go on rail 1, and the link breaks before one of them: a small message
// of host memory, which on a comm of one rail goes inline (an inject whose failure efa reports
// without its context, and which would be lost unseen). `pathBreaksMidStream` breaks the link of
// rail `rail` (1 here, the leader below); `receiverDone` checks the receiver's side.
void pathBreaksMidStream(int rail, const std::function<void(Peer&)>& receiverDone) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  constexpr int kHealthy = 7;    // messages before the link breaks: the next is 1 KiB
  constexpr int kMessages = 18;  // in all
  const int kSizes[3] = {64 << 10, 1024, 1 << 20};
  LinkControl links("failover-path-" + std::to_string(rail));
  const std::string down = std::to_string(rail);
  auto beforeSend = [&](Peer&, int i) {
    if (i != kHealthy) return;
    ASSERT_NO_FATAL_FAILURE(links.setDown(down.c_str()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  auto senderDone = [&](Peer& peer) {
    expectRailWarnings(peer, {rail});
    EXPECT_EQ(reportedSpeed(peer), peer.props.speed / testRails() * (testRails() - 1));
  };
  runOneAtATime(
      kMessages, [&](int i) { return kSizes[i % 3]; }, beforeSend, senderDone, receiverDone);
}

// The same with GPU memory at both ends (the fake CUDA driver's: on softefa the CPU cannot touch
// it, only the NIC and the driver's copies do). Every receive is described (GPU memory takes no
// eager message), flushed as NCCL does (an RDMA read through the first rail up), read back
// through the driver and checked whole, with the sentinels after it. `rail`'s link breaks before
// the eighth message is sent or, `atFlush`, once it is received and before its flush: the flush
// read is then the receiver's first operation on the broken rail, fails, and must go again
// through another (a flush that failed would fail NCCL's receive).
void gpuPathBreaksMidStream(int rail, bool atFlush) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  constexpr int kHealthy = 7;
  constexpr int kMessages = 18;
  const int kSizes[3] = {64 << 10, 1024, 1 << 20};
  constexpr size_t kCapacity = (1 << 20) + 4096;
  LinkControl links("failover-gpu-" + std::to_string(rail));
  const std::string down = std::to_string(rail);
  auto sender = [&](Peer& peer) {
    ASSERT_EQ(peer.props.ptrSupport & abi::kPtrCuda, abi::kPtrCuda);
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    FakeControls fake;
    GpuBuffer* gpu = nullptr;
    void* mh = nullptr;
    ASSERT_NO_FATAL_FAILURE(openFakeAndRegister(peer, comm, &fake, &gpu, kCapacity, &mh));
    for (int i = 0; i < kMessages; ++i) {
      if (i == kHealthy && !atFlush) {
        ASSERT_NO_FATAL_FAILURE(links.setDown(down.c_str()));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      gpu->fill(static_cast<size_t>(kSizes[i % 3]), static_cast<uint64_t>(i));
      void* request;
      ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, gpu->data(), kSizes[i % 3], kTag, mh, &request));
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
      ASSERT_TRUE(peer.channel->wait());  // received and checked before the buffer is reused
    }
    expectRailWarnings(peer, {rail});
    EXPECT_EQ(reportedSpeed(peer), peer.props.speed / testRails() * (testRails() - 1));
    dereg(peer, comm, mh);
    delete gpu;
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    FakeControls fake;
    GpuBuffer* gpu = nullptr;
    void* mh = nullptr;
    ASSERT_NO_FATAL_FAILURE(openFakeAndRegister(peer, comm, &fake, &gpu, kCapacity, &mh));
    for (int i = 0; i < kMessages; ++i) {
      const int size = kSizes[i % 3];
      SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(size) + " B");
      gpu->fill(0, 0);  // all sentinel
      void* request;
      ASSERT_NO_FATAL_FAILURE(
          postRecv(peer, comm, gpu->data(), static_cast<int>(kCapacity), kTag, mh, &request));
      int received = -1;
      ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &received));
      ASSERT_EQ(received, size);
      if (i == kHealthy && atFlush) {
        ASSERT_NO_FATAL_FAILURE(links.setDown(down.c_str()));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      ASSERT_NO_FATAL_FAILURE(flushReceive(peer, comm, *gpu, received, mh));
      expectMessageIn(*gpu, static_cast<size_t>(size), static_cast<uint64_t>(i));
      ASSERT_TRUE(peer.channel->signal());
    }
    if (atFlush) {
      // The flush read was the first to meet the broken link; later ones took the rail left.
      EXPECT_EQ(infoLinesWith(peer, "a flush read failed with rail"), 1);
      expectRailWarnings(peer, {rail});
    } else {
      // The share in flight when the link broke, and no later one.
      EXPECT_EQ(sharesWrittenAgain(peer), 1);
    }
    dereg(peer, comm, mh);
    delete gpu;
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 180);
}

TEST(Failover, ARailWhosePathBreaksLosesNoGpuMessage) {
  gpuPathBreaksMidStream(1, false);
}

TEST(Failover, TheLeaderWhosePathBreaksLosesNoGpuMessage) {
  gpuPathBreaksMidStream(0, false);
}

// Flushes read through the first rail up: the leader, until the receiver knows it broke.
TEST(Failover, AFlushOnALeaderThatJustBrokeReadsThroughAnotherRail) {
  gpuPathBreaksMidStream(0, true);
}

TEST(Failover, ARailWhosePathBreaksIsLeftOutAndNoMessageIsLost) {
  pathBreaksMidStream(1, [](Peer& peer) {
    // The message in flight when the link broke, and no later one: they left the rail out.
    EXPECT_EQ(sharesWrittenAgain(peer), 1);
  });
}

// A NIC whose link breaks and is mended (issue 27: "a restored rail carries data again within
// 5 s"; the time is printed, not asserted: a busy machine sets it). While it is down the device
// probes it (an RMA read through it, every NCCL_FABRIC_RAIL_PROBE_MS: 1 s); once the link works the
// next probe succeeds, the device says so in one INFO line, reports the full speed again, and new
// messages are striped over it again (the stand-in counts its bytes; on the software device a
// second break of the link shows it: a share that was on it fails and goes again, "failed again").
// Every message verified, one WARN.
void linkMendedCarriesDataAgain(int rail) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  constexpr int kBroken = 7;        // messages before the link breaks
  constexpr int kMended = 12;       // messages before it is mended
  constexpr int kBrokenAgain = 18;  // messages before it breaks again
  constexpr int kMessages = 21;
  constexpr int kStriped = 1 << 20;
  const int kSizes[3] = {64 << 10, 1024, kStriped};
  auto sizeOf = [&](int i) { return i < kMended ? kSizes[i % 3] : kStriped; };
  LinkControl links("failover-mend-" + std::to_string(rail));
  const std::string nic =
      "rail " + std::to_string(rail) + " (NIC " + efaRulesDomainName(rail) + ")";
  const std::string down = std::to_string(rail);
  std::map<std::string, uint64_t> beforeMended;
  auto beforeSend = [&](Peer& peer, int i) {
    if (i == kBroken || i == kBrokenAgain) {
      ASSERT_NO_FATAL_FAILURE(links.setDown(down.c_str()));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (i == kMended) {
      ASSERT_NO_FATAL_FAILURE(links.setDown(""));
      // The device's own thread probes: nobody needs to call the plugin meanwhile. (The probe's
      // own timing is bounded in fake time by RdmaFailoverOverFakeFabric.)
      double seconds = secondsUntil([&] { return infoLinesWith(peer, nic + " works again") > 0; });
      ASSERT_EQ(infoLinesWith(peer, nic + " works again"), 1)
          << "not back after " << seconds << " s";
      std::printf("[ mended  ] rail %d rejoined %.2f s after its link was mended\n", rail, seconds);
      EXPECT_EQ(reportedSpeed(peer), peer.props.speed) << "the full speed is reported again";
      if (!onSoftEfa()) beforeMended = carriedByRail();
    }
    if (i == kBrokenAgain && !onSoftEfa()) {
      std::map<std::string, uint64_t> after = carriedByRail();
      EXPECT_TRUE(
          everyRailCarried(beforeMended, after, uint64_t{kStriped} * (kBrokenAgain - kMended)));
    }
  };
  auto senderDone = [&](Peer& peer) {
    expectRailWarnings(peer, {rail});
    EXPECT_EQ(infoLinesWith(peer, nic + " failed again"), 1)
        << "the rail carried nothing after it rejoined";
  };
  auto receiverDone = [&](Peer& peer) {
    // One share in flight at each break.
    EXPECT_EQ(sharesWrittenAgain(peer), 2);
  };
  runOneAtATime(kMessages, sizeOf, beforeSend, senderDone, receiverDone);
}

TEST(Failover, ARailWhoseLinkIsMendedCarriesDataAgain) {
  linkMendedCarriesDataAgain(1);
}

// The same with the leader: while it is down the comm's control messages and own writes go on
// the rail left; once it rejoins they, and striped shares, take it again.
TEST(Failover, TheLeaderWhoseLinkIsMendedCarriesDataAgain) {
  linkMendedCarriesDataAgain(0);
}

// NIC 1's link is down from the start, before the first write on it to the peer. On the real
// efa provider (softefa) that write starts a handshake, which fails: the endpoint reports "No
// route to host" on its event queue, naming no operation, and efa never sends nor completes what
// it queued behind the handshake. The device takes the rail down on that report, and after a
// grace (100 ms) takes those writes back (the peer's address leaves the rail, which ends them in
// efa, silently) and fails them as a broken path's writes: the sender asks about the share and
// writes it again on the leader. Before, the message waited for ever. On the stand-in the write
// itself fails ("unreachable"), as on a path that broke later.
TEST(Failover, ANicDownBeforeItsFirstWriteIsLeftOut) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  constexpr int kMessages = 12;
  const int kSizes[3] = {64 << 10, 1024, 1 << 20};
  ScopedEnv env;
  env.set("NNF_EFA_RULES_FAIL_AFTER_OPS", "1:0");
  env.set("NNF_SOFT_EFA_FAIL_AFTER_OPS", "1:0");
  auto senderDone = [&](Peer& peer) {
    expectRailWarnings(peer, {1});
    EXPECT_EQ(reportedSpeed(peer), peer.props.speed / testRails() * (testRails() - 1));
    const int takenBack = infoLinesWith(peer, "taken back and sent again on the rails left");
    std::printf("[ stranded ] %d time(s) writes stranded on rail 1 were taken back\n", takenBack);
    if (onSoftEfa()) {
      EXPECT_EQ(takenBack, 1) << "efa's failed handshake was not what the test met";
    }
  };
  auto receiverDone = [&](Peer& peer) {
    // The first message with a share on rail 1, and no later one: they left the rail out.
    EXPECT_EQ(sharesWrittenAgain(peer), 1);
  };
  runOneAtATime(
      kMessages, [&](int i) { return kSizes[i % 3]; }, [](Peer&, int) {}, senderDone, receiverDone);
}

// The same NIC, down before its first write, mended after a few messages: the probe finds it
// working, the rail rejoins, and the peer's address that went back into the rail fresh (the old
// one was removed to end what efa had stranded) carries striped messages again, with a handshake
// of its own: nothing fails on it again, and on the stand-in it carries its share.
TEST(Failover, ANicDownBeforeItsFirstWriteRejoinsWhenMended) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  constexpr int kMended = 6;     // messages before the link is mended
  constexpr int kMessages = 12;  // the last six striped over every rail again
  constexpr int kStriped = 1 << 20;
  const int kSizes[3] = {64 << 10, 1024, kStriped};
  auto sizeOf = [&](int i) { return i < kMended ? kSizes[i % 3] : kStriped; };
  LinkControl links("failover-first-mend");
  ASSERT_NO_FATAL_FAILURE(links.setDown("1"));
  const std::string rejoined = "rail 1 (NIC " + efaRulesDomainName(1) + ") works again";
  std::map<std::string, uint64_t> beforeMended;
  auto beforeSend = [&](Peer& peer, int i) {
    if (i != kMended) return;
    ASSERT_NO_FATAL_FAILURE(links.setDown(""));
    secondsUntil([&] { return infoLinesWith(peer, rejoined) > 0; });
    ASSERT_EQ(infoLinesWith(peer, rejoined), 1) << "the rail did not rejoin";
    if (!onSoftEfa()) beforeMended = carriedByRail();
  };
  auto senderDone = [&](Peer& peer) {
    expectRailWarnings(peer, {1});
    EXPECT_EQ(infoLinesWith(peer, "failed again"), 0) << "the fresh address did not work";
    if (onSoftEfa()) {
      EXPECT_EQ(infoLinesWith(peer, "taken back and sent again on the rails left"), 1)
          << "efa's failed handshake was not what the test met";
    }
    EXPECT_EQ(reportedSpeed(peer), peer.props.speed);
    if (!onSoftEfa()) {
      EXPECT_TRUE(everyRailCarried(beforeMended, carriedByRail(),
                                   uint64_t{kStriped} * (kMessages - kMended)));
    }
  };
  auto receiverDone = [&](Peer& peer) { EXPECT_EQ(sharesWrittenAgain(peer), 1); };
  runOneAtATime(kMessages, sizeOf, beforeSend, senderDone, receiverDone);
}

// The same with windows of 16 messages in flight (1 MiB striped, 64-80 KiB whole on one rail):
// every write the first window put on NIC 1 is stranded behind the failed handshake on efa, and
// all of them are taken back at once and go again on the rails left.
TEST(Failover, AWindowOnANicDownBeforeItsFirstWriteArrivesWhole) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  constexpr int kWindow = 16;
  constexpr int kWindows = 3;
  auto sizeOf = [](int i) { return i % 2 == 0 ? 1 << 20 : (64 << 10) + 4096 * (i % 5); };
  ScopedEnv env;
  env.set("NNF_EFA_RULES_FAIL_AFTER_OPS", "1:0");
  env.set("NNF_SOFT_EFA_FAIL_AFTER_OPS", "1:0");
  auto senderDone = [&](Peer& peer) {
    expectRailWarnings(peer, {1});
    if (onSoftEfa()) {
      EXPECT_EQ(infoLinesWith(peer, "taken back and sent again on the rails left"), 1);
    }
  };
  auto receiverDone = [&](Peer& peer) {
    const int asked = sharesAskedAbout(peer);
    std::printf("[ stranded ] %d shares asked about\n", asked);
    EXPECT_GE(asked, 1) << "no share was asked about: the test missed its case";
    EXPECT_LE(asked, kWindow) << "later messages did not leave the rail out";
  };
  runWindows(kWindows, kWindow, size_t{1} << 20, sizeOf, senderDone, receiverDone);
}

// The link of NIC 1 breaks while windows of 16 messages are in flight (after a number of its
// operations: NNF_*_FAIL_AFTER_OPS): writes taken before the break complete with an error, on
// the stand-in with their bytes possibly landed (the acknowledgement lost), so the receiver may
// have counted part of a share, or all of a buffer, when the sender asks. Every message arrives
// whole, once: nothing counted twice (a buffer completing early would fail the pattern check of
// its last bytes), nothing lost.
TEST(Failover, AWindowInFlightWhenARailBreaksArrivesWhole) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  if (testRails() < 2) GTEST_SKIP() << "needs two rails or more";
  constexpr int kWindow = 16;
  constexpr int kWindows = 4;
  auto sizeOf = [](int i) { return i % 2 == 0 ? 1 << 20 : (64 << 10) + 4096 * (i % 5); };
  ScopedEnv env;
  // NIC 1 goes down for good after 24 operations taken on it: inside the second window.
  env.set("NNF_EFA_RULES_FAIL_AFTER_OPS", "1:24");
  env.set("NNF_SOFT_EFA_FAIL_AFTER_OPS", "1:24");
  auto senderDone = [&](Peer& peer) { expectRailWarnings(peer, {1}); };
  auto receiverDone = [&](Peer& peer) {
    // Writes in flight when the link broke (a window's at most), and none later; each written
    // again, or found in a buffer that had ended (the stand-in may land a write it fails, and
    // with four rails a window's shares on the broken rail may all have landed).
    const int asked = sharesAskedAbout(peer);
    EXPECT_GE(asked, 1) << "no share was asked about: the test missed its case";
    EXPECT_LE(asked, kWindow) << "later messages did not leave the rail out";
    EXPECT_LE(sharesWrittenAgain(peer), asked);
  };
  runWindows(kWindows, kWindow, size_t{1} << 20, sizeOf, senderDone, receiverDone);
}

// The link of NIC 1 breaks while windows of 32 small messages are in flight: most of them go
// eagerly, over both rails in turn, into the receiver's bounce entries. Those on NIC 1 when it
// breaks fail at the sender (on the stand-in some after landing), are asked about by their entry
// and its generation and written again into the same entry on the leader; the receiver takes
// each once. Every message arrives whole, once, and no request fails.
TEST(Failover, EagerMessagesInFlightWhenARailBreaksArriveOnce) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  if (testRails() < 2) GTEST_SKIP() << "needs two rails or more";
  constexpr int kWindow = 32;
  constexpr int kWindows = 8;
  constexpr int kSlot = 4096;
  auto sizeOf = [](int i) { return 64 + (i * 389) % (kSlot - 64); };
  ScopedEnv env;
  // NIC 1 goes down for good after 48 operations taken on it: a few windows in.
  env.set("NNF_EFA_RULES_FAIL_AFTER_OPS", "1:48");
  env.set("NNF_SOFT_EFA_FAIL_AFTER_OPS", "1:48");
  auto senderDone = [&](Peer& peer) { expectRailWarnings(peer, {1}); };
  auto receiverDone = [&](Peer& peer) {
    int asked = infoLinesWith(peer, "the sender's eager message on rail 1");
    std::printf("[ eager    ] %d eager messages asked about, %d taken twice and left alone\n",
                asked, infoLinesWith(peer, "landed a second time"));
    EXPECT_GE(asked, 1) << "no eager message was asked about: the test missed its case";
    EXPECT_LE(asked, kWindow) << "later messages did not leave the rail out";
  };
  runWindows(kWindows, kWindow, kSlot, sizeOf, senderDone, receiverDone);
}

// Two NICs of four break one after the other (two NIC planes failing at different times), while
// messages of three sizes go one at a time (two whole on one rail, one striped over the rails
// up). At each break the first message with a share on the newly broken rail loses it there;
// the sender asks the receiver about it and writes it again on a rail still up. The device names
// each rail once, with the rails left ("3 of 4", then "2 of 4"), reports half its speed at the
// end, and every message arrives whole, once. With two rails the second break would be the last
// rail's, which fails its comms by design.
TEST(Failover, TwoRailsThatBreakOneAfterTheOtherLoseNothing) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  if (testRails() < 3) GTEST_SKIP() << "needs three rails or more (efa+rdma+4rails)";
  constexpr int kFirstBreak = 7;    // messages before NIC 1's link breaks
  constexpr int kSecondBreak = 14;  // messages before NIC 2's breaks too
  constexpr int kMessages = 24;
  const int kSizes[3] = {64 << 10, 1024, 1 << 20};
  LinkControl links("failover-two");
  auto beforeSend = [&](Peer&, int i) {
    if (i != kFirstBreak && i != kSecondBreak) return;
    ASSERT_NO_FATAL_FAILURE(links.setDown(i == kFirstBreak ? "1" : "1,2"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  auto senderDone = [&](Peer& peer) {
    expectRailWarnings(peer, {1, 2});
    EXPECT_EQ(reportedSpeed(peer), peer.props.speed / testRails() * (testRails() - 2));
  };
  auto receiverDone = [&](Peer& peer) {
    // One share at each break (the messages go one at a time, and later ones leave the rail
    // out), written again or found in a buffer that had ended.
    const int asked = sharesAskedAbout(peer);
    std::printf("[ failover ] %d shares asked about, %d written again\n", asked,
                sharesWrittenAgain(peer));
    EXPECT_EQ(asked, 2);
    EXPECT_GE(sharesWrittenAgain(peer), 1);
  };
  runOneAtATime(
      kMessages, [&](int i) { return kSizes[i % 3]; }, beforeSend, senderDone, receiverDone);
}

// The leader's link breaks in mid-stream (issue 27: "a leader failure is the hardest case and
// must work"). Before, the comm failed: control messages, the receiver's descriptor and credit
// writes, the sender's eager limit, voids and the question about a failed share all went on the
// leader. Now each goes on the first rail up, and one that fails with the leader goes again
// there (the sender takes a descriptor group once, by its slot's generation). Messages of three
// sizes in turn, one at a time, the leader's link broken before the eighth: every byte arrives,
// no request fails, the leader is named once, and the speed left is reported.
TEST(Failover, TheLeadersLinkBreaksAndNoMessageIsLost) {
  // The receiver writes on the leader too (its descriptors and answers): it names it as well.
  pathBreaksMidStream(0, [](Peer& peer) { expectRailWarnings(peer, {0}); });
}

// The leader's link breaks while windows of 16 messages are in flight (striped, whole on one
// rail, and small ones that go eagerly): writes of data, descriptors and credits fail with it, at
// both ends; each goes again on a rail up (a share after the receiver's answer, which comes on a
// rail up too). Every message arrives whole, once, and no request fails.
TEST(Failover, WindowsInFlightWhenTheLeaderBreaksArriveWhole) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  constexpr int kWindow = 16;
  constexpr int kWindows = 6;
  auto sizeOf = [](int i) {
    switch (i % 4) {
      case 0:
        return 1 << 20;
      case 1:
        return (64 << 10) + 4096 * (i % 5);
      case 2:
        return 1024 + 8 * i;
      default:
        return 8 << 10;
    }
  };
  LinkControl links("failover-leader-windows");
  // The leader's link breaks once the second window is posted: its writes are in flight.
  auto posted = [&](int w) {
    if (w == 1) {
      ASSERT_NO_FATAL_FAILURE(links.setDown("0"));
    }
  };
  // What went again on a rail up (printed: which writes were in flight at the break is the
  // machine's timing; that none was lost is what the checks of every byte assert).
  auto report = [&](Peer& peer, const char* side) {
    expectRailWarnings(peer, {0});
    const int ownAgain = infoLinesWith(peer, "written again on rail");
    std::printf("[ leader   ] %s: %d own writes and %d control messages went again, %d shares\n",
                side, ownAgain, infoLinesWith(peer, "sent again on rail"),
                sharesWrittenAgain(peer));
    // Those on the leader when it broke: a window's descriptors and a credit write at most.
    // Later ones go on the rail up from the start.
    EXPECT_LE(ownAgain, kWindow + 1) << "own writes kept going on the broken leader";
  };
  auto senderDone = [&](Peer& peer) { report(peer, "sender"); };
  auto receiverDone = [&](Peer& peer) { report(peer, "receiver"); };
  runWindows(kWindows, kWindow, size_t{1} << 20, sizeOf, senderDone, receiverDone, posted);
}

// A peer's NIC breaks while ours work (a NIC, cable or switch port on its side: at thousands of
// GPUs as likely as one on ours). The stand-in takes the receiver's NIC `rail` down in the
// receiver's view only, so that the sender's writes to it fail as SRD reports an unresponsive
// peer while a read through the sender's own NIC still works. The sender's device takes that one
// path down, not the rail: its comm to the receiver moves data on the other rails (every byte
// verified, the share in flight asked about and written again), its WARN names the path and
// says the other peers keep the rail, it reports the full speed, and its comm to another peer
// (itself, a pair in one process) still stripes over the rail. Then the receiver's NIC is mended:
// the path's probe (a header-only control message to the peer over that rail) is delivered
// within seconds, one INFO line says so, and the comm stripes over the rail again. Before paths
// were told apart, the sender's rail went down for every peer (and the probe of its own NIC
// brought it back only to fail again at the next write to the broken peer).
// `kHealthy`: messages before the receiver's NIC breaks. `silent`: it goes silent instead (what
// goes through it neither arrives nor fails: the stand-in's "s<n>"), and the sender finds the path
// by its writes that stop completing there while its others complete (NCCL_FABRIC_RAIL_TIMEOUT_MS,
// 300 ms here), takes them back and writes them again elsewhere; the path's probes go unanswered
// until the NIC is mended (each is taken back after the same bound).
void peerNicBreaks(int rail, int kHealthy, bool silent = false) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  ScopedEnv env;
  if (silent) {
    env.set("NCCL_FABRIC_RAIL_TIMEOUT_MS", "300");
    // SRD gives up on what a silent link holds only well after the plugin found the path (so the
    // WARN below is the silence watch's; with libfabric 2.1's efa the stuck write goes again only
    // then: nothing is taken back there).
    env.set("NNF_EFA_RULES_SILENT_GIVE_UP_MS", "3000");
    env.set("NNF_SOFT_EFA_SILENT_GIVE_UP_MS", "3000");
  }
  constexpr int kMended = 13;  // messages before it is mended
  constexpr int kMessages = 19;
  constexpr int kStriped = 1 << 20;
  const int kSizes[3] = {64 << 10, 1024, kStriped};
  auto sizeOf = [&](int i) { return i < kMended ? kSizes[i % 3] : kStriped; };
  LinkControl links("failover-peer-nic-" + std::to_string(rail));
  const std::string down = (silent ? "s" : "") + std::to_string(rail);
  const std::string nic =
      "rail " + std::to_string(rail) + " (NIC " + efaRulesDomainName(rail) + ")";
  auto sender = [&](Peer& peer) {
    void* comm;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
    long receiverPid = 0;
    ASSERT_TRUE(peer.channel->recvValue(&receiverPid));
    // A second peer that keeps every NIC: this process itself.
    Handle handle{};
    void *listen, *selfSend, *selfRecv;
    ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, &listen));
    ASSERT_NO_FATAL_FAILURE(connectLocal(peer, listen, &handle, &selfSend, &selfRecv));
    HostBuffer buffer(size_t{1} << 20);
    HostBuffer selfBuffer(size_t{2} << 20);
    void *mh, *selfSendMh, *selfRecvMh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
    ASSERT_NO_FATAL_FAILURE(regHost(peer, selfSend, selfBuffer.data(), kStriped, &selfSendMh));
    ASSERT_NO_FATAL_FAILURE(
        regHost(peer, selfRecv, selfBuffer.data() + kStriped, kStriped, &selfRecvMh));
    // Striped messages to ourselves while the receiver's NIC is down: every rail carries its share.
    auto selfTrafficUsesEveryRail = [&]() {
      constexpr int kSelfMessages = 4;
      std::map<std::string, uint64_t> before = carriedByRail();
      for (int m = 0; m < kSelfMessages; ++m) {
        fillPattern(selfBuffer.data(), kStriped, 1000 + m);
        void *recvRequest, *sendRequest;
        ASSERT_NO_FATAL_FAILURE(postRecv(peer, selfRecv, selfBuffer.data() + kStriped, kStriped,
                                         kTag, selfRecvMh, &recvRequest));
        ASSERT_NO_FATAL_FAILURE(
            postSend(peer, selfSend, selfBuffer.data(), kStriped, kTag, selfSendMh, &sendRequest));
        std::vector<int> sizes;
        ASSERT_NO_FATAL_FAILURE(waitAll(peer, {recvRequest, sendRequest}, &sizes));
        EXPECT_EQ(sizes[0], kStriped);
        EXPECT_TRUE(verifyPattern(selfBuffer.data() + kStriped, kStriped, 1000 + m));
      }
      EXPECT_TRUE(everyRailCarried(before, carriedByRail(), uint64_t{kStriped} * kSelfMessages))
          << "another peer lost the rail";
    };
    std::map<std::string, uint64_t> beforeMended;
    for (int i = 0; i < kMessages; ++i) {
      if (i == kHealthy) {
        ASSERT_NO_FATAL_FAILURE(links.setDownFor(receiverPid, down.c_str()));
        // Silent: long enough (two bounds) that the messages before are no witness for the stuck
        // one: only the comm's ping is (SilenceWatch::Findings::unwitnessed).
        std::this_thread::sleep_for(std::chrono::milliseconds(silent ? 600 : 20));
      }
      if (i == kMended) {
        // The path broke and our rail did not: named once as a path, the speed kept.
        int pathWarnings = 0, railWarnings = 0;
        for (const std::string& text : peer.warningTexts()) {
          pathWarnings += text.find(nic) != std::string::npos &&
                          text.find("path to the peer at") != std::string::npos &&
                          (!silent || text.find("completed no write") != std::string::npos);
          railWarnings += text.find("moves data on") != std::string::npos;
        }
        EXPECT_EQ(pathWarnings, 1) << "the broken path is named once";
        EXPECT_EQ(railWarnings, 0) << "our healthy NIC was blamed";
        EXPECT_EQ(reportedSpeed(peer), peer.props.speed);
        // The real efa provider refuses RMA writes to its own endpoint ("Operation not
        // supported"): the second peer is the stand-in's.
        if (!onSoftEfa()) {
          ASSERT_NO_FATAL_FAILURE(selfTrafficUsesEveryRail());
        }
        // A silent NIC stays so past the path's first probe (NCCL_FABRIC_RAIL_PROBE_MS, 1 s after
        // the path went down), which it swallows: that probe never answers, and the path rejoins
        // only because it is taken back after the bound and a later one is posted.
        if (silent) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        ASSERT_NO_FATAL_FAILURE(links.setDownFor(receiverPid, ""));
        // Our keeper probes the path: nobody needs to call the plugin meanwhile.
        const std::string back = nic + " to the peer at";
        auto rejoined = [&]() {
          int count = 0;
          for (const std::string& line : peer.infoTexts()) {
            count += line.find(back) != std::string::npos &&
                     line.find("works again") != std::string::npos;
          }
          return count;
        };
        double seconds = secondsUntil([&] { return rejoined() > 0; });
        ASSERT_EQ(rejoined(), 1) << "not back after " << seconds << " s";
        std::printf("[ path     ] rail %d's path rejoined %.2f s after the peer's NIC was mended\n",
                    rail, seconds);
        beforeMended = carriedByRail();
      }
      ASSERT_NO_FATAL_FAILURE(sendOneAndWait(peer, comm, buffer.data(), sizeOf(i), mh, i));
    }
    EXPECT_TRUE(
        everyRailCarried(beforeMended, carriedByRail(), uint64_t{kStriped} * (kMessages - kMended)))
        << "the mended path carries nothing";
    dereg(peer, selfSend, selfSendMh);
    dereg(peer, selfRecv, selfRecvMh);
    dereg(peer, comm, mh);
    closeSend(peer, selfSend);
    closeRecv(peer, selfRecv);
    closeListen(peer, listen);
    closeSend(peer, comm);
  };
  auto receiver = [&](Peer& peer) {
    void *listen, *comm;
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
    ASSERT_TRUE(peer.channel->sendValue(static_cast<long>(getpid())));
    ASSERT_NO_FATAL_FAILURE(receiveEachAndVerify(peer, comm, kMessages, sizeOf));
    // The share in flight when the NIC broke, and no later one: they left the path out.
    EXPECT_EQ(sharesWrittenAgain(peer), 1);
    closeRecv(peer, comm);
    closeListen(peer, listen);
  };
  runTwoProcesses(sender, receiver, 180);
}

// The NIC breaks before the eighth message (1 KiB, whole on that rail in turn).
TEST(Failover, APeersBrokenNicLeavesTheRailToEveryOtherPeer) {
  peerNicBreaks(1, 7);
}

// The same with the peer's leader NIC: the comm's control messages and own writes to that peer
// go on its other rails, while the leader keeps carrying everything else.
TEST(Failover, APeersBrokenLeaderNicLeavesTheLeaderToEveryOtherPeer) {
  peerNicBreaks(0, 7);
}

// The peer's NIC breaks before our first write to it there. On the real efa provider (softefa)
// that write starts a handshake, which fails: the endpoint reports it on its event queue, naming
// no peer, and never completes what it queued behind it. Our NIC's read succeeds, so after the
// grace the peers of the writes still held there are the broken paths (not the rail): their
// writes are taken back and go again on the other rails, and the path is probed (its probe's
// handshake fails the same way until the NIC is mended).
TEST(Failover, APeersNicDownBeforeOurFirstWriteToItBreaksOnePath) {
  peerNicBreaks(1, 0);
}

// A peer's NIC goes silent (a NIC reset, a link that drops everything, with no error for efa to
// report): the 1 KiB message whose turn is that rail neither lands nor fails. Our writes to that
// peer on the other rails complete, so after the bound the path is named as broken (our own NIC's
// read works), the stuck share is taken back (its peer's address removed: the stand-in forgets it
// then, as efa does) and written again on another rail, and the later messages leave the path
// out. On the software EFA device the real efa provider drops what it held for the removed peer,
// and ignores the completions the device gives those writes once the NIC is mended (failed, as
// SRD reports what its retries gave up on).
TEST(Failover, APeersSilentNicIsFoundAndLeavesTheRailToEveryOtherPeer) {
  peerNicBreaks(1, 7, /*silent=*/true);
}

// The same with the peer's leader NIC: its control messages, our writes to it and its own writes
// to us (descriptors) go silent there.
TEST(Failover, APeersSilentLeaderNicIsFoundAndLeavesTheLeaderToEveryOtherPeer) {
  peerNicBreaks(0, 7, /*silent=*/true);
}

// NCCL connects peers when it first needs them (point-to-point, alltoall): a comm that connects
// after the leader's link broke must reach its peer over another rail. The listen handle carries
// the listener's rails beyond the leader (those that fit: three of efa's addresses), the connect
// message goes on the first rail up toward the listener, and the accept comes back on the rail
// the connect came on. Comm A carries messages first; then comm B connects and carries messages
// of three sizes, each arriving whole, the leader named once at each end.
enum class LeaderDown {
  kKnown,          // its link broke under A's messages: both devices know before B connects
  kMetByConnect,   // it broke after A's last message: B's connect message meets it first, fails
                   // on the leader and goes again on rail 1
  kPeersNicKnown,  // the receiver's leader NIC alone broke under A's messages: the sender knows
                   // its path there is broken (not its rail), and B's connect leaves it out
  kPeersNicFirst,  // the receiver's leader NIC alone is down before A connects: A's connect
                   // message is the sender's first operation toward it (on efa, a handshake)
};

void aCommConnectsWhileTheLeaderIsDown(LeaderDown mode) {
  REQUIRE_RAILS();
  if (testProtocol() != "rdma") GTEST_SKIP() << "only the rdma protocol stripes over the rails";
  constexpr int kMessagesOnA = 6;
  constexpr int kBreakAt = 3;  // before A's fourth message, unless kMetByConnect
  constexpr int kMessagesOnB = 9;
  const int kSizes[3] = {64 << 10, 1024, 1 << 20};
  auto sizeOf = [&](int i) { return kSizes[i % 3]; };
  LinkControl links("failover-connect-" + std::to_string(static_cast<int>(mode)));
  const int breakAt = mode == LeaderDown::kMetByConnect    ? kMessagesOnA
                      : mode == LeaderDown::kPeersNicFirst ? -1  // the receiver breaks it
                                                           : kBreakAt;
  const bool peersNic = mode == LeaderDown::kPeersNicKnown || mode == LeaderDown::kPeersNicFirst;
  const std::string leader = "rail 0 (NIC " + efaRulesDomainName(0) + ")";
  auto sender = [&](Peer& peer) {
    void *first, *second;
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &first));
    long receiverPid = 0;
    ASSERT_TRUE(peer.channel->recvValue(&receiverPid));
    HostBuffer buffer(size_t{1} << 20);
    void* mh;
    ASSERT_NO_FATAL_FAILURE(regHost(peer, first, buffer.data(), buffer.size(), &mh));
    for (int i = 0; i <= kMessagesOnA; ++i) {
      if (i == breakAt) {
        if (mode == LeaderDown::kPeersNicKnown) {
          ASSERT_NO_FATAL_FAILURE(links.setDownFor(receiverPid, "0"));
        } else {
          ASSERT_NO_FATAL_FAILURE(links.setDown("0"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the stand-ins read it
      }
      if (i == kMessagesOnA) break;
      ASSERT_NO_FATAL_FAILURE(sendOneAndWait(peer, first, buffer.data(), sizeOf(i), mh, i));
    }
    ASSERT_TRUE(peer.channel->sendValue(1L));  // the receiver may listen for B now
    ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &second));
    for (int i = 0; i < kMessagesOnB; ++i) {
      ASSERT_NO_FATAL_FAILURE(sendOneAndWait(peer, second, buffer.data(), sizeOf(i), mh, i));
    }
    if (peersNic) {
      int pathWarnings = 0, railWarnings = 0;
      for (const std::string& text : peer.warningTexts()) {
        pathWarnings += text.find(leader) != std::string::npos &&
                        text.find("path to the peer at") != std::string::npos;
        railWarnings += text.find("moves data on") != std::string::npos;
      }
      EXPECT_EQ(pathWarnings, 1) << "the broken path is named once";
      EXPECT_EQ(railWarnings, 0) << "our healthy leader was blamed";
    } else {
      expectRailWarnings(peer, {0});
    }
    const int sentAgain =
        infoLinesWith(peer, "a control message failed with rail 0; sent again on rail 1");
    if (mode == LeaderDown::kMetByConnect || mode == LeaderDown::kPeersNicFirst) {
      EXPECT_EQ(sentAgain, 1) << "the connect message did not meet the broken leader";
    } else if (!onSoftEfa()) {
      // The sender's own writes on A found the break (on the software device the receiver's
      // descriptor writes may find it first, and the connect message meets it then).
      EXPECT_EQ(sentAgain, 0) << "the connect message went on the leader known down";
    }
    dereg(peer, first, mh);
    closeSend(peer, second);
    closeSend(peer, first);
  };
  auto receiver = [&](Peer& peer) {
    void *listenA, *first, *listenB, *second;
    if (mode == LeaderDown::kPeersNicFirst) {
      ASSERT_NO_FATAL_FAILURE(links.setDownFor(getpid(), "0"));
    }
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listenA, &first));
    ASSERT_TRUE(peer.channel->sendValue(static_cast<long>(getpid())));
    ASSERT_NO_FATAL_FAILURE(receiveEachAndVerify(peer, first, kMessagesOnA, sizeOf));
    long go = 0;
    ASSERT_TRUE(peer.channel->recvValue(&go));
    ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listenB, &second));
    ASSERT_NO_FATAL_FAILURE(receiveEachAndVerify(peer, second, kMessagesOnB, sizeOf));
    expectRailWarnings(peer, {0});  // its own NIC, in every mode
    if (mode == LeaderDown::kPeersNicFirst && onSoftEfa()) {
      // Its first writes toward the sender's leader started efa's handshake from a NIC that is
      // down: the endpoint error, and what efa held behind it (descriptor writes) taken back.
      EXPECT_EQ(infoLinesWith(peer, "after its endpoint failed: taken back"), 1)
          << "efa's failed handshake on the leader was not what the test met";
    }
    closeRecv(peer, second);
    closeListen(peer, listenB);
    closeRecv(peer, first);
    closeListen(peer, listenA);
  };
  runTwoProcesses(sender, receiver, 180);
}

TEST(Failover, ACommConnectsWhileTheLeaderIsKnownDown) {
  aCommConnectsWhileTheLeaderIsDown(LeaderDown::kKnown);
}

TEST(Failover, ACommWhoseConnectMeetsTheBrokenLeaderConnectsOverAnotherRail) {
  aCommConnectsWhileTheLeaderIsDown(LeaderDown::kMetByConnect);
}

TEST(Failover, ACommConnectsToAPeerWhoseLeaderNicIsDown) {
  aCommConnectsWhileTheLeaderIsDown(LeaderDown::kPeersNicKnown);
}

TEST(Failover, ACommConnectsToAPeerWhoseLeaderNicWasDownBeforeItsFirstMessage) {
  aCommConnectsWhileTheLeaderIsDown(LeaderDown::kPeersNicFirst);
}

}  // namespace
}  // namespace nnf::test
