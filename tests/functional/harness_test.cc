// The harness itself: a test that cannot fail proves nothing, so check that a child's failed
// expectation, crash or hang does reach the parent, and that the pattern verifier finds a
// single wrong byte. The children print their (expected) failures.
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/patterns.h"
#include "support/plugin_ops.h"

namespace nnf::test {
namespace {

TEST(Harness, ChildThatPassesExitsZero) {
  EXPECT_EQ(runOneProcessRaw([](Peer& peer) { EXPECT_GE(peer.ndev, 1); }, 30), 0);
}

TEST(Harness, FailedExpectationInAChildIsAFailure) {
  printf("(an expected failure from a child follows)\n");
  EXPECT_EQ(runOneProcessRaw([](Peer&) { EXPECT_EQ(1, 2) << "deliberate"; }, 30), 1);
}

TEST(Harness, CrashInAChildIsAFailure) {
  // SIGKILL: catchable signals meet the providers' crash handlers, which exit(1) and leave
  // backtrace files behind.
  EXPECT_EQ(runOneProcessRaw([](Peer&) { raise(SIGKILL); }, 30), 128 + SIGKILL);
}

TEST(Harness, HangInAChildIsKilledAtTheTimeout) {
  EXPECT_EQ(runOneProcessRaw(
                [](Peer&) {
                  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
                },
                2),
            -1);
}

TEST(Harness, ChannelReportsAPeerThatExited) {
  printf("(an expected failure from a child follows)\n");
  // The receiver waits for a signal the sender never sends: EOF, not a hang.
  int code = runOneProcessRaw(
      [](Peer&) {
        int fds[2];
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        Channel mine(fds[0]);
        close(fds[1]);
        EXPECT_FALSE(mine.wait(5));
        if (!::testing::Test::HasFailure()) ADD_FAILURE() << "wait() reported nothing";
      },
      30);
  EXPECT_EQ(code, 1);
}

TEST(Patterns, VerifierFindsOneWrongByte) {
  HostBuffer buffer(100003);
  fillPattern(buffer.data(), buffer.size(), 9);
  EXPECT_TRUE(verifyPattern(buffer.data(), buffer.size(), 9));
  EXPECT_FALSE(verifyPattern(buffer.data(), buffer.size(), 10)) << "messages must differ";
  buffer.data()[77777] ^= 1;
  ::testing::AssertionResult result = verifyPattern(buffer.data(), buffer.size(), 9);
  ASSERT_FALSE(result);
  EXPECT_NE(std::string(result.message()).find("offset 77777"), std::string::npos)
      << result.message();
  EXPECT_NE(std::string(result.message()).find("1 bytes wrong"), std::string::npos)
      << result.message();
  // The tail past the last full word is checked too.
  buffer.data()[77777] ^= 1;
  buffer.data()[100002] ^= 0x80;
  EXPECT_FALSE(verifyPattern(buffer.data(), buffer.size(), 9));
  // A buffer shifted by one byte is not the message.
  EXPECT_FALSE(verifyPattern(buffer.data() + 1, 1000, 9));
  EXPECT_EQ(patternByte(9, 5), buffer.data()[5]);
}

}  // namespace
}  // namespace nnf::test
