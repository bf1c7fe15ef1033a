// The data protocol NCCL_FABRIC_PROTOCOL=auto runs (src/platform/protocol_choice.*): rdma where
// the provider writes with remote CQ data on every NIC by itself (shm, tcp, EFA with device RDMA
// write), sendrecv where EFA emulates writes in software (the EFA-rules provider answers
// FI_OPT_EFA_EMULATED_WRITE as NNF_EFA_RULES_EMULATED_WRITE says). Each choice is read from the
// plugin's INFO line and, on the EFA-rules provider, from the bytes it counted as RMA writes;
// data moves and is verified under each.
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/harness.h"
#include "support/plugin_ops.h"
#include "support/scoped_env.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kTag = 0x51;
constexpr size_t kTail = 4096;
const std::vector<int> kSizes = {0, 8, 4096, 65537, 1 << 20, (4 << 20) + 5};

bool onEfa() {
  return testProvider() == "efa";
}

// The plugin's "protocol <name>: <reason>" INFO line, "" when it logged none.
std::string protocolLine(const Peer& peer) {
  for (const std::string& line : peer.infoTexts()) {
    if (line.find("protocol rdma:") != std::string::npos ||
        line.find("protocol sendrecv:") != std::string::npos) {
      return line;
    }
  }
  return "";
}

// Bytes this process wrote by RMA on the EFA-rules provider so far (every NIC).
uint64_t writtenByRma() {
  uint64_t written = 0;
  EXPECT_TRUE(efaRulesWrittenHere(&written)) << "the EFA-rules provider is not loaded here";
  return written;
}

// Makes the NIC's writes emulated by the provider, as on a p4d: the stand-in answers
// FI_OPT_EFA_EMULATED_WRITE so; the software device has no RDMA write, so the real provider
// emulates them (its writes then never reach the device as writes).
void emulateWrites(ScopedEnv& env, bool emulated) {
  if (onSoftEfa()) {
    if (emulated) env.set("NNF_SOFT_EFA_NO_RDMA_WRITE", "1");
  } else {
    env.set("NNF_EFA_RULES_EMULATED_WRITE", emulated ? "1" : "0");
  }
}

// Runs kSizes from sender to receiver; each side first checks the protocol its plugin logged
// (`expected` and, when given, a word of the reason); on EFA the sender's RMA bytes say whether
// the data went by write (on the software device: by device writes, none where emulated).
void expectProtocolAndData(const std::string& expected, const std::string& because,
                           bool emulated = false) {
  auto check = [&](Peer& peer) {
    std::string line = protocolLine(peer);
    EXPECT_NE(line.find("protocol " + expected + ":"), std::string::npos)
        << "the plugin logged: \"" << line << "\"";
    if (!because.empty()) {
      EXPECT_NE(line.find(because), std::string::npos) << line;
    }
  };
  auto sender = [&](Peer& peer) {
    check(peer);
    uint64_t before = onEfa() ? writtenByRma() : 0;
    ASSERT_NO_FATAL_FAILURE(sendEachInTurn(peer, kSizes, kTag));
    if (!onEfa()) return;
    uint64_t written = writtenByRma() - before;
    if (expected == "rdma" && !(emulated && onSoftEfa())) {
      EXPECT_GE(written, uint64_t{(1 << 20) + (4 << 20)}) << "rdma wrote too few bytes by RMA";
    } else {
      EXPECT_EQ(written, 0u) << "sendrecv wrote by RMA";
    }
  };
  auto receiver = [&](Peer& peer) {
    check(peer);
    receiveEachInTurn(peer, kSizes, kTag, kTail);
  };
  runTwoProcesses(sender, receiver, 120);
}

TEST(Protocol, AutoRunsRdmaWhereTheProviderWritesWithRemoteCqData) {
  ScopedEnv env;
  env.set("NCCL_FABRIC_PROTOCOL", "auto");
  // A p5's NIC: device RDMA write.
  if (onEfa()) emulateWrites(env, false);
  expectProtocolAndData("rdma", "offers RMA writes with remote CQ data on every NIC");
}

TEST(Protocol, AutoRunsSendrecvWhereEfaEmulatesWrites) {
  if (!onEfa()) GTEST_SKIP() << "only EFA says whether its writes are emulated";
  ScopedEnv env;
  env.set("NCCL_FABRIC_PROTOCOL", "auto");
  // A p4d's NIC: RDMA read only, writes emulated by the provider.
  emulateWrites(env, true);
  expectProtocolAndData("sendrecv", "emulates RMA writes in software", true);
}

TEST(Protocol, RdmaAskedForRunsOverEmulatedWritesToo) {
  if (!onEfa()) GTEST_SKIP() << "only EFA says whether its writes are emulated";
  ScopedEnv env;
  env.set("NCCL_FABRIC_PROTOCOL", "rdma");
  emulateWrites(env, true);
  expectProtocolAndData("rdma", "(emulated in software here)", true);
}

TEST(Protocol, SendrecvAskedForRunsEvenWhereWritesAreOffered) {
  ScopedEnv env;
  env.set("NCCL_FABRIC_PROTOCOL", "sendrecv");
  if (onEfa()) emulateWrites(env, false);
  expectProtocolAndData("sendrecv", "NCCL_FABRIC_PROTOCOL=sendrecv");
}

}  // namespace
}  // namespace nnf::test
