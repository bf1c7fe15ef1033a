// Input validation at the ABI: every entry point called the way a buggy caller (or a corrupted
// NCCL) might call it. Each bad call must return a non-success ncclResult_t (ncclInternalError:
// misuse by the caller) and log exactly one WARN; never crash. Each case runs in a child process
// of its own, so a crash in one is reported as that case's failure and cannot hide the others;
// after the bad call the child proves the plugin still moves data on the same comms.
//
// Pointers that were freed (a comm after close, a handle after deregMr) are deliberately not
// passed: reading them is undefined behaviour in the test itself. What the plugin can detect
// safely is what is tested: NULL, a buffer of garbage bytes, a buffer of zeros, a live object of
// the wrong kind, a request tested again after it reported done.
#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reliability_support.h"
#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x77;
constexpr int kSize = 4096;

// Bytes that are nothing the plugin made: deterministic, so that a failure reproduces.
struct Junk {
  alignas(64) uint8_t garbage[4096];
  alignas(64) uint8_t zeros[4096];
  Junk() {
    std::mt19937 random(12345);
    for (uint8_t& byte : garbage) byte = static_cast<uint8_t>(random());
    memset(zeros, 0, sizeof(zeros));
  }
};

// What a case can use: a connected comm pair (in one process), a listen comm, registered
// buffers and junk.
struct Fixture {
  Peer* peer = nullptr;
  const abi::NetV8* net = nullptr;
  Handle handle;
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  std::unique_ptr<HostBuffer> out;
  std::unique_ptr<HostBuffer> in;
  void* sendMh = nullptr;
  void* recvMh = nullptr;
  Junk junk;
  void* garbage() { return junk.garbage; }
  void* zeros() { return junk.zeros; }
};

// One message send -> recv on the fixture's comms, every byte checked.
void transfer(Fixture& fx, uint64_t message) {
  Peer& peer = *fx.peer;
  fillPattern(fx.out->data(), kSize, message);
  fillSentinel(fx.in->data(), kSize);
  void *sendReq, *recvReq;
  ASSERT_NO_FATAL_FAILURE(postRecv(peer, fx.recv, fx.in->data(), kSize, kTag, fx.recvMh, &recvReq));
  ASSERT_NO_FATAL_FAILURE(
      postSend(peer, fx.send, fx.out->data(), kSize, kTag, fx.sendMh, &sendReq));
  std::vector<int> sizes;
  ASSERT_NO_FATAL_FAILURE(waitAll(peer, {recvReq, sendReq}, &sizes));
  EXPECT_EQ(sizes[0], kSize);
  EXPECT_TRUE(verifyPattern(fx.in->data(), kSize, message));
}

void setUp(Peer& peer, Fixture& fx) {
  fx.peer = &peer;
  fx.net = peer.net;
  fx.out = std::make_unique<HostBuffer>(kSize);
  fx.in = std::make_unique<HostBuffer>(kSize);
  ASSERT_NO_FATAL_FAILURE(listenOn(peer, &fx.handle, &fx.listen));
  ASSERT_NO_FATAL_FAILURE(connectLocal(peer, fx.listen, &fx.handle, &fx.send, &fx.recv));
  ASSERT_NO_FATAL_FAILURE(regHost(peer, fx.send, fx.out->data(), kSize, &fx.sendMh));
  ASSERT_NO_FATAL_FAILURE(regHost(peer, fx.recv, fx.in->data(), kSize, &fx.recvMh));
}

void tearDown(Fixture& fx) {
  Peer& peer = *fx.peer;
  dereg(peer, fx.send, fx.sendMh);
  dereg(peer, fx.recv, fx.recvMh);
  closeSend(peer, fx.send);
  closeRecv(peer, fx.recv);
  closeListen(peer, fx.listen);
}

struct Case {
  const char* name;
  std::function<abi::Result(Fixture&)> call;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

// Arrays for irecv large enough for any n a case passes.
struct RecvArgs {
  void* data[40];
  int sizes[40];
  int tags[40];
  void* mhandles[40];
  explicit RecvArgs(Fixture& fx) {
    for (int i = 0; i < 40; ++i) {
      data[i] = fx.in->data();
      sizes[i] = 0;
      tags[i] = kTag;
      mhandles[i] = fx.recvMh;
    }
    sizes[0] = kSize;
  }
};

abi::Result irecvWith(Fixture& fx, void* comm, int n, const std::function<void(RecvArgs&)>& edit,
                      bool nullRequest = false) {
  RecvArgs args(fx);
  edit(args);
  void* request = nullptr;
  return fx.net->irecv(comm, n, args.data, args.sizes, args.tags, args.mhandles,
                       nullRequest ? nullptr : &request);
}

abi::Result isendWith(Fixture& fx, void* comm, void* data, int size, void* mhandle) {
  void* request = nullptr;
  return fx.net->isend(comm, data, size, kTag, mhandle, &request);
}

abi::Result deviceProperties(Fixture& fx, int dev) {
  abi::PropertiesV8 props;
  return fx.net->getProperties(dev, &props);
}

abi::Result listenOnDevice(Fixture& fx, int dev) {
  Handle handle;
  void* comm = nullptr;
  return fx.net->listen(dev, handle.bytes, &comm);
}

abi::Result connectWith(Fixture& fx, int dev, void* handle) {
  void* comm = nullptr;
  abi::NetDeviceHandleV8* devComm = nullptr;
  return fx.net->connect(dev, handle, &comm, &devComm);
}

abi::Result acceptOnComm(void* listen, Fixture& fx) {
  void* comm = nullptr;
  abi::NetDeviceHandleV8* devComm = nullptr;
  return fx.net->accept(listen, &comm, &devComm);
}

abi::Result regWith(Fixture& fx, void* comm, void* data, size_t size, int type) {
  void* mhandle = nullptr;
  abi::Result result = fx.net->regMr(comm, data, size, type, &mhandle);
  // A wrongly accepted registration would leak; give it back so the case stays independent.
  if (result == abi::kSuccess && mhandle != nullptr) fx.net->deregMr(comm, mhandle);
  return result;
}

abi::Result testWith(Fixture& fx, void* request) {
  int done = 0;
  int sizes[abi::kMaxRequests];
  return fx.net->test(request, &done, sizes);
}

abi::Result iflushWith(Fixture& fx, void* comm, bool nullRequest = false) {
  void* data[1] = {fx.in->data()};
  int sizes[1] = {kSize};
  void* mhandles[1] = {fx.recvMh};
  void* request = nullptr;
  return fx.net->iflush(comm, 1, data, sizes, mhandles, nullRequest ? nullptr : &request);
}

// A request that has completed and been reported done once: testing it again is misuse.
abi::Result testAfterDone(Fixture& fx, bool sendSide) {
  Peer& peer = *fx.peer;
  fillPattern(fx.out->data(), kSize, 99);
  void *sendReq = nullptr, *recvReq = nullptr;
  postRecv(peer, fx.recv, fx.in->data(), kSize, kTag, fx.recvMh, &recvReq);
  postSend(peer, fx.send, fx.out->data(), kSize, kTag, fx.sendMh, &sendReq);
  std::vector<int> sizes;
  waitAll(peer, {recvReq, sendReq}, &sizes);
  if (::testing::Test::HasFatalFailure()) return abi::kSuccess;  // set-up failed: reported
  // Only what the misuse itself logs counts.
  peer.resetWarnings();
  int done = -1;
  int reported[abi::kMaxRequests];
  abi::Result result = fx.net->test(sendSide ? sendReq : recvReq, &done, reported);
  EXPECT_NE(done, 1) << "a finished request reported done a second time";
  return result;
}

std::vector<Case> cases() {
  return {
      // devices / getProperties
      {"devices_NullCount", [](Fixture& fx) { return fx.net->devices(nullptr); }},
      {"getProperties_DeviceMinus1", [](Fixture& fx) { return deviceProperties(fx, -1); }},
      {"getProperties_DeviceCount",
       [](Fixture& fx) { return deviceProperties(fx, fx.peer->ndev); }},
      {"getProperties_DeviceIntMax", [](Fixture& fx) { return deviceProperties(fx, INT_MAX); }},
      {"getProperties_NullProps", [](Fixture& fx) { return fx.net->getProperties(0, nullptr); }},
      // listen
      {"listen_DeviceMinus1", [](Fixture& fx) { return listenOnDevice(fx, -1); }},
      {"listen_DeviceCount", [](Fixture& fx) { return listenOnDevice(fx, fx.peer->ndev); }},
      {"listen_NullHandle",
       [](Fixture& fx) {
         void* comm = nullptr;
         return fx.net->listen(0, nullptr, &comm);
       }},
      {"listen_NullComm",
       [](Fixture& fx) {
         Handle handle;
         return fx.net->listen(0, handle.bytes, nullptr);
       }},
      // connect
      {"connect_DeviceMinus1", [](Fixture& fx) { return connectWith(fx, -1, fx.handle.bytes); }},
      {"connect_DeviceCount",
       [](Fixture& fx) { return connectWith(fx, fx.peer->ndev, fx.handle.bytes); }},
      {"connect_NullHandle", [](Fixture& fx) { return connectWith(fx, 0, nullptr); }},
      {"connect_ZeroHandle", [](Fixture& fx) { return connectWith(fx, 0, fx.zeros()); }},
      {"connect_GarbageHandle", [](Fixture& fx) { return connectWith(fx, 0, fx.garbage()); }},
      {"connect_NullComm",
       [](Fixture& fx) {
         abi::NetDeviceHandleV8* devComm = nullptr;
         return fx.net->connect(0, fx.handle.bytes, nullptr, &devComm);
       }},
      // accept
      {"accept_NullListenComm", [](Fixture& fx) { return acceptOnComm(nullptr, fx); }},
      {"accept_GarbageListenComm", [](Fixture& fx) { return acceptOnComm(fx.garbage(), fx); }},
      {"accept_ZeroListenComm", [](Fixture& fx) { return acceptOnComm(fx.zeros(), fx); }},
      {"accept_SendCommAsListenComm", [](Fixture& fx) { return acceptOnComm(fx.send, fx); }},
      {"accept_NullRecvComm",
       [](Fixture& fx) {
         abi::NetDeviceHandleV8* devComm = nullptr;
         return fx.net->accept(fx.listen, nullptr, &devComm);
       }},
      // regMr / regMrDmaBuf / deregMr
      {"regMr_NullComm",
       [](Fixture& fx) { return regWith(fx, nullptr, fx.out->data(), kSize, abi::kPtrHost); }},
      {"regMr_GarbageComm",
       [](Fixture& fx) { return regWith(fx, fx.garbage(), fx.out->data(), kSize, abi::kPtrHost); }},
      {"regMr_ListenComm",
       [](Fixture& fx) { return regWith(fx, fx.listen, fx.out->data(), kSize, abi::kPtrHost); }},
      {"regMr_NullData",
       [](Fixture& fx) { return regWith(fx, fx.send, nullptr, kSize, abi::kPtrHost); }},
      {"regMr_UnknownType",
       [](Fixture& fx) { return regWith(fx, fx.send, fx.out->data(), kSize, 0x40); }},
      {"regMr_NullMhandle",
       [](Fixture& fx) {
         return fx.net->regMr(fx.send, fx.out->data(), kSize, abi::kPtrHost, nullptr);
       }},
      {"regMrDmaBuf_NullMhandle",
       [](Fixture& fx) {
         return fx.net->regMrDmaBuf(fx.send, fx.out->data(), kSize, abi::kPtrHost, 0, -1, nullptr);
       }},
      {"deregMr_NullMhandle", [](Fixture& fx) { return fx.net->deregMr(fx.send, nullptr); }},
      {"deregMr_GarbageMhandle",
       [](Fixture& fx) { return fx.net->deregMr(fx.send, fx.garbage()); }},
      {"deregMr_ZeroMhandle", [](Fixture& fx) { return fx.net->deregMr(fx.send, fx.zeros()); }},
      // isend
      {"isend_NullComm",
       [](Fixture& fx) { return isendWith(fx, nullptr, fx.out->data(), kSize, fx.sendMh); }},
      {"isend_GarbageComm",
       [](Fixture& fx) { return isendWith(fx, fx.garbage(), fx.out->data(), kSize, fx.sendMh); }},
      {"isend_ZeroComm",
       [](Fixture& fx) { return isendWith(fx, fx.zeros(), fx.out->data(), kSize, fx.sendMh); }},
      {"isend_RecvComm",
       [](Fixture& fx) { return isendWith(fx, fx.recv, fx.out->data(), kSize, fx.sendMh); }},
      {"isend_ListenComm",
       [](Fixture& fx) { return isendWith(fx, fx.listen, fx.out->data(), kSize, fx.sendMh); }},
      {"isend_NegativeSize",
       [](Fixture& fx) { return isendWith(fx, fx.send, fx.out->data(), -1, fx.sendMh); }},
      {"isend_IntMinSize",
       [](Fixture& fx) { return isendWith(fx, fx.send, fx.out->data(), INT_MIN, fx.sendMh); }},
      {"isend_NullData",
       [](Fixture& fx) { return isendWith(fx, fx.send, nullptr, kSize, fx.sendMh); }},
      {"isend_GarbageMhandle",
       [](Fixture& fx) { return isendWith(fx, fx.send, fx.out->data(), kSize, fx.garbage()); }},
      {"isend_ZeroMhandle",
       [](Fixture& fx) { return isendWith(fx, fx.send, fx.out->data(), kSize, fx.zeros()); }},
      {"isend_NullRequest",
       [](Fixture& fx) {
         return fx.net->isend(fx.send, fx.out->data(), kSize, kTag, fx.sendMh, nullptr);
       }},
      // irecv
      {"irecv_NullComm", [](Fixture& fx) { return irecvWith(fx, nullptr, 1, [](RecvArgs&) {}); }},
      {"irecv_GarbageComm",
       [](Fixture& fx) { return irecvWith(fx, fx.garbage(), 1, [](RecvArgs&) {}); }},
      {"irecv_SendComm", [](Fixture& fx) { return irecvWith(fx, fx.send, 1, [](RecvArgs&) {}); }},
      {"irecv_CountZero", [](Fixture& fx) { return irecvWith(fx, fx.recv, 0, [](RecvArgs&) {}); }},
      {"irecv_CountMinus1",
       [](Fixture& fx) { return irecvWith(fx, fx.recv, -1, [](RecvArgs&) {}); }},
      {"irecv_CountAboveMaxRecvs",
       [](Fixture& fx) {
         return irecvWith(fx, fx.recv, fx.peer->props.maxRecvs + 1, [](RecvArgs&) {});
       }},
      {"irecv_CountAboveNcclLimit",
       [](Fixture& fx) { return irecvWith(fx, fx.recv, abi::kMaxRequests + 1, [](RecvArgs&) {}); }},
      {"irecv_NegativeSize",
       [](Fixture& fx) { return irecvWith(fx, fx.recv, 1, [](RecvArgs& a) { a.sizes[0] = -5; }); }},
      {"irecv_NullBuffer",
       [](Fixture& fx) {
         return irecvWith(fx, fx.recv, 1, [](RecvArgs& a) { a.data[0] = nullptr; });
       }},
      {"irecv_GarbageMhandle",
       [](Fixture& fx) {
         void* junk = fx.garbage();
         return irecvWith(fx, fx.recv, 1, [junk](RecvArgs& a) { a.mhandles[0] = junk; });
       }},
      {"irecv_NullSizes",
       [](Fixture& fx) {
         RecvArgs args(fx);
         void* request = nullptr;
         return fx.net->irecv(fx.recv, 1, args.data, nullptr, args.tags, args.mhandles, &request);
       }},
      {"irecv_NullDataArray",
       [](Fixture& fx) {
         RecvArgs args(fx);
         void* request = nullptr;
         return fx.net->irecv(fx.recv, 1, nullptr, args.sizes, args.tags, args.mhandles, &request);
       }},
      {"irecv_NullTags",
       [](Fixture& fx) {
         RecvArgs args(fx);
         void* request = nullptr;
         return fx.net->irecv(fx.recv, 1, args.data, args.sizes, nullptr, args.mhandles, &request);
       }},
      {"irecv_NullRequest",
       [](Fixture& fx) {
         return irecvWith(
             fx, fx.recv, 1, [](RecvArgs&) {}, true);
       }},
      // iflush
      {"iflush_NullComm", [](Fixture& fx) { return iflushWith(fx, nullptr); }},
      {"iflush_GarbageComm", [](Fixture& fx) { return iflushWith(fx, fx.garbage()); }},
      {"iflush_SendComm", [](Fixture& fx) { return iflushWith(fx, fx.send); }},
      {"iflush_NullRequest", [](Fixture& fx) { return iflushWith(fx, fx.recv, true); }},
      // test
      {"test_NullRequest", [](Fixture& fx) { return testWith(fx, nullptr); }},
      {"test_GarbageRequest", [](Fixture& fx) { return testWith(fx, fx.garbage()); }},
      {"test_ZeroRequest", [](Fixture& fx) { return testWith(fx, fx.zeros()); }},
      {"test_NullDone",
       [](Fixture& fx) {
         int sizes[abi::kMaxRequests];
         return fx.net->test(fx.garbage(), nullptr, sizes);
       }},
      {"test_SendRequestAfterDone", [](Fixture& fx) { return testAfterDone(fx, true); }},
      {"test_RecvRequestAfterDone", [](Fixture& fx) { return testAfterDone(fx, false); }},
      // closes
      {"closeSend_Null", [](Fixture& fx) { return fx.net->closeSend(nullptr); }},
      {"closeSend_Garbage", [](Fixture& fx) { return fx.net->closeSend(fx.garbage()); }},
      {"closeSend_Zeros", [](Fixture& fx) { return fx.net->closeSend(fx.zeros()); }},
      {"closeSend_RecvComm", [](Fixture& fx) { return fx.net->closeSend(fx.recv); }},
      {"closeSend_ListenComm", [](Fixture& fx) { return fx.net->closeSend(fx.listen); }},
      {"closeRecv_Null", [](Fixture& fx) { return fx.net->closeRecv(nullptr); }},
      {"closeRecv_Garbage", [](Fixture& fx) { return fx.net->closeRecv(fx.garbage()); }},
      {"closeRecv_SendComm", [](Fixture& fx) { return fx.net->closeRecv(fx.send); }},
      {"closeListen_Null", [](Fixture& fx) { return fx.net->closeListen(nullptr); }},
      {"closeListen_Garbage", [](Fixture& fx) { return fx.net->closeListen(fx.garbage()); }},
      {"closeListen_RecvComm", [](Fixture& fx) { return fx.net->closeListen(fx.recv); }},
  };
}

class BadInput : public ::testing::TestWithParam<Case> {};

TEST_P(BadInput, FailsWithOneWarnAndLeavesThePluginWorking) {
  const Case& c = GetParam();
  runOneProcess([&](Peer& peer) {
    Fixture fx;
    ASSERT_NO_FATAL_FAILURE(setUp(peer, fx));
    peer.resetWarnings();
    abi::Result result = c.call(fx);
    if (::testing::Test::HasFatalFailure()) return;
    int warnings = peer.warnings();
    EXPECT_NE(result, abi::kSuccess) << c.name << " was accepted";
    // Misuse by the caller is ncclInternalError (BRIEF §2).
    EXPECT_EQ(result, abi::kInternalError) << c.name;
    std::string texts;
    for (const std::string& text : peer.warningTexts()) texts += "\n  " + text;
    EXPECT_EQ(warnings, 1) << c.name << " logged " << warnings << " WARN lines:" << texts;
    // The bad call must not have damaged anything: the same comms still carry data.
    peer.resetWarnings();
    ASSERT_NO_FATAL_FAILURE(transfer(fx, 7));
    tearDown(fx);
    EXPECT_EQ(peer.warnings(), 0) << "the plugin kept warning after the bad call";
  });
}

INSTANTIATE_TEST_SUITE_P(Abi, BadInput, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Calls made before init: NCCL never does this, but a tool or a broken loader might. There is
// no logger yet, so the plugin's WARN lines go to stderr; they are counted there.
class StderrCapture {
 public:
  StderrCapture() {
    fflush(stderr);
    saved_ = dup(2);
    fd_ = memfd_create("nnf-stderr", 0);
    dup2(fd_, 2);
  }
  // Restores stderr and returns the lines written meanwhile.
  std::vector<std::string> finish() {
    fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::string text;
    char buffer[4096];
    lseek(fd_, 0, SEEK_SET);
    for (ssize_t got; (got = read(fd_, buffer, sizeof(buffer))) > 0;) text.append(buffer, got);
    close(fd_);
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      lines.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    return lines;
  }

 private:
  int saved_ = -1;
  int fd_ = -1;
};

struct EarlyCase {
  const char* name;
  std::function<abi::Result(const abi::NetV8&)> call;
};

std::ostream& operator<<(std::ostream& os, const EarlyCase& c) {
  return os << c.name;
}

std::vector<EarlyCase> earlyCases() {
  return {
      {"devices",
       [](const abi::NetV8& net) {
         int count = -1;
         return net.devices(&count);
       }},
      {"getProperties",
       [](const abi::NetV8& net) {
         abi::PropertiesV8 props;
         return net.getProperties(0, &props);
       }},
      {"listen",
       [](const abi::NetV8& net) {
         Handle handle;
         void* comm = nullptr;
         return net.listen(0, handle.bytes, &comm);
       }},
      {"connect",
       [](const abi::NetV8& net) {
         Handle handle;
         memset(handle.bytes, 0, sizeof(handle.bytes));
         void* comm = nullptr;
         abi::NetDeviceHandleV8* devComm = nullptr;
         return net.connect(0, handle.bytes, &comm, &devComm);
       }},
  };
}

class BeforeInit : public ::testing::TestWithParam<EarlyCase> {};

TEST_P(BeforeInit, FailsWithOneWarn) {
  const EarlyCase& c = GetParam();
  runBare([&] {
    std::unique_ptr<tools::PluginLibrary> library;
    try {
      library = std::make_unique<tools::PluginLibrary>(pluginPath(), testAbiVersion());
    } catch (const std::exception& error) {
      FAIL() << error.what();
    }
    StderrCapture capture;
    abi::Result result = c.call(library->net());
    std::vector<std::string> lines = capture.finish();
    int warnings = 0;
    std::string texts;
    for (const std::string& line : lines) {
      texts += "\n  " + line;
      if (line.rfind("WARN", 0) == 0) ++warnings;
    }
    EXPECT_EQ(result, abi::kInternalError) << c.name << " before init";
    EXPECT_EQ(warnings, 1) << c.name << " before init wrote:" << texts;
    // And init still works afterwards.
    EXPECT_EQ(library->net().init(testLogger), abi::kSuccess);
  });
}

INSTANTIATE_TEST_SUITE_P(Abi, BeforeInit, ::testing::ValuesIn(earlyCases()),
                         [](const ::testing::TestParamInfo<EarlyCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace nnf::test
