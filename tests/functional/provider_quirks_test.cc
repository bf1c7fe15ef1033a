// Provider behaviour the plugin's rules depend on, checked with raw libfabric on the provider
// under test: when a rule says a provider misbehaves, the misbehaviour must be there, and where
// it says the provider is fine, it must be fine. A libfabric upgrade that changes either shows
// up here rather than as corrupted data.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/provider.h"
#include "fabric/rail.h"
#include "platform/provider_rules.h"
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

}  // namespace
}  // namespace nnf::test
