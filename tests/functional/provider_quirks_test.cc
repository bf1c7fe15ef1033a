// Provider behaviour the plugin's rules depend on, checked with raw libfabric on the provider
// under test: when a rule says a provider misbehaves, the misbehaviour must be there, and where
// it says the provider is fine, it must be fine. A libfabric upgrade that changes either shows
// up here rather than as corrupted data.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/provider.h"
#include "fabric/rail.h"
#include "platform/provider_rules.h"
#include "support/processes.h"
#include "support/test_env.h"

namespace nnf::test {
namespace {

constexpr int kPolls = 2000000;

// Reads one completion (or error): its context, or nullptr when none came.
void* waitCompletion(fabric::Rail& rail, uint64_t* tag) {
  for (int i = 0; i < kPolls; ++i) {
    fi_cq_tagged_entry entry{};
    ssize_t n = rail.readCompletions(&entry, 1);
    if (n == 1) {
      *tag = entry.tag;
      return entry.op_context;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry error{};
      const char* text = nullptr;
      rail.readError(&error, &text);
      *tag = error.tag;
      return error.op_context;
    }
  }
  return nullptr;
}

bool sendToSelf(fabric::Rail& rail, fi_addr_t self, char* buffer, size_t length, uint64_t tag,
                fi_context2* context) {
  for (int i = 0; i < kPolls; ++i) {
    ssize_t ret = rail.tsend(buffer, length, nullptr, self, tag, context);
    if (ret == 0) return true;
    if (ret != -FI_EAGAIN) return false;
    fi_cq_tagged_entry entry{};
    rail.readCompletions(&entry, 0);
  }
  return false;
}

// A wildcard receive completes; then a message arrives unexpected for tag A; then an exact
// receive for tag B (differing from A only in bits the wildcard ignored) is posted. It must not
// take the message for A.
TEST(ProviderQuirks, WildcardReceiveRuleMatchesTheProvider) {
  const std::string provider = testProvider();
  if (provider == "efa") GTEST_SKIP() << "the EFA-rules stand-in: its base provider is tested";
  fabric::ProviderChoice choice = fabric::selectProvider("");
  fabric::Rail rail(choice.domains.at(0).get(), 0);
  if (rail.needsLocalRegistration()) GTEST_SKIP() << "needs registered buffers";
  fi_addr_t self = FI_ADDR_UNSPEC;
  ASSERT_EQ(rail.insertAddress(rail.address().data(), rail.address().size(), &self), 0);

  char wildBuffer[64], sendBuffer[64] = {}, exactBuffer[64];
  fi_context2 wild{}, send1{}, send2{}, exact{};
  const uint64_t ignore = ~uint64_t{0} >> 1;
  ASSERT_EQ(rail.trecv(wildBuffer, sizeof(wildBuffer), nullptr, FI_ADDR_UNSPEC, 0, ignore, &wild),
            0);
  ASSERT_TRUE(sendToSelf(rail, self, sendBuffer, 8, 1, &send1));
  uint64_t tag = 0;
  for (int i = 0; i < 2; ++i) ASSERT_NE(waitCompletion(rail, &tag), nullptr);

  const uint64_t tagA = uint64_t{4} << 45;
  const uint64_t tagB = uint64_t{3} << 45;
  ASSERT_TRUE(sendToSelf(rail, self, sendBuffer, 0, tagA, &send2));
  ASSERT_EQ(waitCompletion(rail, &tag), &send2);
  ASSERT_EQ(rail.trecv(exactBuffer, sizeof(exactBuffer), nullptr, FI_ADDR_UNSPEC, tagB, 0, &exact),
            0);
  bool mismatched = waitCompletion(rail, &tag) == &exact;
  if (!mismatched) {
    rail.cancel(&exact);
    waitCompletion(rail, &tag);
  }
  bool safe = platform::wildcardReceivesSafe(platform::familyOf(provider), fi_version());
  EXPECT_EQ(mismatched, !safe) << provider << " on libfabric " << FI_MAJOR(fi_version()) << "."
                               << FI_MINOR(fi_version())
                               << (mismatched ? ": matched a message of another tag"
                                              : ": matched correctly, though the rule says not");
}

// What became of a receive of `posted` bytes that met a send of `sent` bytes.
enum class Truncation { kReported, kOtherResult, kHung, kNotRun };

const char* truncationName(Truncation seen) {
  switch (seen) {
    case Truncation::kReported:
      return "reported the truncation";
    case Truncation::kOtherResult:
      return "completed the receive without reporting a truncation";
    case Truncation::kHung:
      return "never completed the receive";
    case Truncation::kNotRun:
      return "could not run the check";
  }
  return "?";
}

// Child side, as its exit code: 0 when the receive fails with FI_ETRUNC (libfabric 1.17's shm
// sets err to -FI_ETRUNC: for this rule a report all the same), 1 when it ends otherwise, 2 when
// the check cannot run, 3 when the receive never completes. A provider may also spin inside
// fi_cq_read instead: the parent kills the child then.
int truncateToSelf(size_t sent, size_t posted) {
  int code = 2;
  try {
    fabric::ProviderChoice choice = fabric::selectProvider("");
    fabric::Rail rail(choice.domains.at(0).get(), 0);
    fi_addr_t self = FI_ADDR_UNSPEC;
    std::vector<char> out(sent, 'x'), in(sent);
    fi_context2 send{}, recv{};
    if (!rail.needsLocalRegistration() &&
        rail.insertAddress(rail.address().data(), rail.address().size(), &self) == 0 &&
        rail.trecv(in.data(), posted, nullptr, FI_ADDR_UNSPEC, 7, 0, &recv) == 0 &&
        sendToSelf(rail, self, out.data(), sent, 7, &send)) {
      code = 3;
      // Truncations are reported within milliseconds; 3 s means never.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (code == 3 && std::chrono::steady_clock::now() < deadline) {
        fi_cq_tagged_entry entry{};
        ssize_t n = rail.readCompletions(&entry, 1);
        if (n == 1 && entry.op_context == &recv) code = 1;
        fi_cq_err_entry error{};
        const char* text = nullptr;
        if (n == -FI_EAVAIL && rail.readError(&error, &text) > 0 && error.op_context == &recv)
          code = error.err == FI_ETRUNC || error.err == -FI_ETRUNC ? 0 : 1;
      }
    }
  } catch (...) {
  }
  return code;
}

Truncation truncateInChild(size_t sent, size_t posted) {
  int end = runChild([sent, posted] { return truncateToSelf(sent, posted); }, 10);
  if (end == -1 || end == 3) return Truncation::kHung;  // -1: killed at the timeout
  if (end == 0) return Truncation::kReported;
  return end == 1 ? Truncation::kOtherResult : Truncation::kNotRun;
}

// A message on each side of the rule's limit meets a smaller receive: within the limit the
// provider must report the truncation, beyond it the rule says it never does.
TEST(ProviderQuirks, TruncationReportLimitMatchesTheProvider) {
  const std::string provider = testProvider();
  if (provider == "efa") GTEST_SKIP() << "the EFA-rules stand-in: its base provider is tested";
  const size_t limit = platform::truncationReportLimit(platform::familyOf(provider));
  constexpr size_t kSmall = 2048;   // within every provider's inject size
  constexpr size_t kLarge = 65536;  // sent by rendezvous or CMA/SAR everywhere
  Truncation small = truncateInChild(kSmall, kSmall / 2);
  EXPECT_STREQ(truncationName(small), truncationName(Truncation::kReported))
      << provider << ": " << kSmall << " B into " << kSmall / 2 << " B: " << truncationName(small);
  Truncation large = truncateInChild(kLarge, kLarge / 2);
  if (limit == 0 || kLarge <= limit) {
    EXPECT_STREQ(truncationName(large), truncationName(Truncation::kReported))
        << provider << ": " << kLarge << " B into " << kLarge / 2
        << " B: " << truncationName(large);
  } else {
    EXPECT_STREQ(truncationName(large), truncationName(Truncation::kHung))
        << provider << " " << truncationName(large) << " for " << kLarge << " B into " << kLarge / 2
        << " B, though the rule says it reports no truncation above " << limit << " B";
  }
}

}  // namespace
}  // namespace nnf::test
