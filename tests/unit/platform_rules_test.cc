// The provider rules (src/platform) as pure functions: which options an endpoint gets, what a
// refusal costs, tag formats, NCCL_PROTO and the DMA-BUF decision.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <string>

#include "core/tags.h"
#include "platform/dmabuf_probe.h"
#include "platform/endpoint_options.h"
#include "platform/env_defaults.h"
#include "platform/protocol_choice.h"
#include "platform/provider_rules.h"

namespace nnf::platform {
namespace {

std::vector<int> optionNumbers(const std::vector<EndpointOption>& options) {
  std::vector<int> numbers;
  for (const EndpointOption& option : options) numbers.push_back(option.optname);
  return numbers;
}

bool has(const std::vector<int>& numbers, int optname) {
  return std::find(numbers.begin(), numbers.end(), optname) != numbers.end();
}

TEST(ProviderRules, FamiliesFromProviderNames) {
  EXPECT_EQ(familyOf("efa"), Family::kEfa);
  EXPECT_EQ(familyOf("shm"), Family::kShm);
  EXPECT_EQ(familyOf("tcp"), Family::kTcp);
  EXPECT_EQ(familyOf("tcp;ofi_rxm"), Family::kTcp);
  EXPECT_EQ(familyOf("verbs;ofi_rxm"), Family::kOther);
  EXPECT_EQ(familyOf("efa-direct"), Family::kOther);
}

TEST(ProviderRules, EfaEndpointOptionsFollowWhatTheEndpointDoes) {
  const ProviderRules& efa = rulesFor(Family::kEfa);
  EndpointNeeds gpu;
  gpu.hmem = true;
  gpu.readFlush = true;
  std::vector<int> all = optionNumbers(optionsFor(efa, gpu));
  EXPECT_TRUE(has(all, opt::kCudaApiPermitted));
  EXPECT_TRUE(has(all, opt::kSharedMemoryPermitted));
  EXPECT_TRUE(has(all, opt::kEfaSendRecvInOrderAligned128));
  EXPECT_FALSE(has(all, opt::kEfaWriteInOrderAligned128));  // sendrecv writes nothing

  EndpointNeeds host;
  std::vector<int> hostOnly = optionNumbers(optionsFor(efa, host));
  EXPECT_EQ(hostOnly, std::vector<int>{opt::kEfaSendRecvInOrderAligned128});

  EndpointNeeds rma;
  rma.sendRecv = false;
  rma.rmaWrite = true;
  EXPECT_EQ(optionNumbers(optionsFor(efa, rma)), std::vector<int>{opt::kEfaWriteInOrderAligned128});
  for (const EndpointOption& option : efa.options) {
    if (option.optname == opt::kCudaApiPermitted || option.optname == opt::kSharedMemoryPermitted)
      EXPECT_FALSE(option.value) << option.name;
    else
      EXPECT_TRUE(option.value) << option.name;
  }
  EXPECT_TRUE(efa.unorderedDelivery);
}

TEST(ProviderRules, OtherProvidersOnlyForbidCudaCallsWithDeviceMemory) {
  for (Family family : {Family::kShm, Family::kTcp, Family::kOther}) {
    const ProviderRules& rules = rulesFor(family);
    EXPECT_FALSE(rules.unorderedDelivery);
    EXPECT_TRUE(rules.envDefaults.empty());
    EndpointNeeds needs;
    needs.readFlush = true;
    EXPECT_TRUE(optionsFor(rules, needs).empty()) << familyName(family);
    needs.hmem = true;
    EXPECT_EQ(optionNumbers(optionsFor(rules, needs)), std::vector<int>{opt::kCudaApiPermitted});
  }
}

// libfabric 2.1's efa reads a removed peer when the device reports a write it still held
// (docs/efa.md), and tcp's socket delivers what it holds for a removed peer: there a silent
// path's writes are never taken back; efa's fix is in 2.3.
TEST(ProviderRules, PostedWritesAreTakenBackOnlyWhereTheProviderCanForgetThem) {
  EXPECT_FALSE(postedWritesTakenBackSafely(Family::kEfa, FI_VERSION(2, 1)));
  EXPECT_FALSE(postedWritesTakenBackSafely(Family::kEfa, FI_VERSION(1, 17)));
  EXPECT_TRUE(postedWritesTakenBackSafely(Family::kEfa, FI_VERSION(2, 3)));
  EXPECT_FALSE(postedWritesTakenBackSafely(Family::kTcp, FI_VERSION(2, 1)));
  EXPECT_FALSE(postedWritesTakenBackSafely(Family::kTcp, FI_VERSION(1, 17)));
}

TEST(ProviderRules, EfaEnvironmentDefaults) {
  const ProviderRules& efa = rulesFor(Family::kEfa);
  std::vector<std::string> names;
  for (const EnvDefault& item : efa.envDefaults) names.push_back(item.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "FI_EFA_USE_HUGE_PAGE"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "FI_EFA_FORK_SAFE"), names.end());
}

TEST(ProviderRules, EnvDefaultsNeverOverrideTheUser) {
  setenv("FI_EFA_USE_HUGE_PAGE", "1", 1);
  unsetenv("FI_EFA_FORK_SAFE");
  applyEnvDefaults(rulesFor(Family::kEfa));
  EXPECT_STREQ(getenv("FI_EFA_USE_HUGE_PAGE"), "1");
  EXPECT_STREQ(getenv("FI_EFA_FORK_SAFE"), "1");
  unsetenv("FI_EFA_USE_HUGE_PAGE");
  unsetenv("FI_EFA_FORK_SAFE");
}

TEST(EndpointOptions, EachRefusalCostsWhatItShould) {
  const ProviderRules& efa = rulesFor(Family::kEfa);
  EndpointNeeds gpu;
  gpu.hmem = true;
  gpu.readFlush = true;
  std::vector<OptionResult> results;
  for (const EndpointOption& option : optionsFor(efa, gpu)) results.push_back({option, 0});
  OptionVerdict clean = verdictOf(results);
  EXPECT_FALSE(clean.hostMemoryOnly || clean.noLL128 || clean.noReadFlush);

  for (size_t refused = 0; refused < results.size(); ++refused) {
    std::vector<OptionResult> some = results;
    some[refused].rc = -FI_EOPNOTSUPP;
    OptionVerdict verdict = verdictOf(some);
    int optname = some[refused].option.optname;
    EXPECT_EQ(verdict.hostMemoryOnly, optname == opt::kCudaApiPermitted);
    EXPECT_EQ(verdict.noReadFlush, optname == opt::kSharedMemoryPermitted);
    EXPECT_EQ(verdict.noLL128, optname == opt::kEfaSendRecvInOrderAligned128);
  }
}

// Each protocol asks only for the ordering of what carries its data: rdma's writes (libfabric
// 2.4 refuses the message option outright), sendrecv's tagged messages.
TEST(EndpointOptions, EachProtocolAsksOnlyForTheOrderingOfItsData) {
  const ProviderRules& efa = rulesFor(Family::kEfa);
  EndpointNeeds rdma;
  rdma.hmem = true;
  rdma.rmaWrite = true;
  rdma.sendRecv = false;
  EndpointNeeds sendrecv;
  sendrecv.hmem = true;
  auto asks = [&](const EndpointNeeds& needs, int optname) {
    for (const EndpointOption& option : optionsFor(efa, needs)) {
      if (option.optname == optname) return true;
    }
    return false;
  };
  EXPECT_TRUE(asks(rdma, opt::kEfaWriteInOrderAligned128));
  EXPECT_FALSE(asks(rdma, opt::kEfaSendRecvInOrderAligned128));
  EXPECT_TRUE(asks(sendrecv, opt::kEfaSendRecvInOrderAligned128));
  EXPECT_FALSE(asks(sendrecv, opt::kEfaWriteInOrderAligned128));
}

TEST(TagFormat, GenericFormatTakesEveryBitAndNarrowerOnesAreRefused) {
  std::string why;
  EXPECT_EQ(matchableTagBits(kTagGeneric), ~uint64_t{0});
  EXPECT_EQ(matchableTagBits(0), ~uint64_t{0});
  EXPECT_EQ(matchableTagBits(kTagGeneric >> 16), (uint64_t{1} << 48) - 1);
  EXPECT_TRUE(tagFormatFits(kTagGeneric, core::tags::kBitsUsed, &why));
  EXPECT_TRUE(tagFormatFits(0, core::tags::kBitsUsed, &why));
  EXPECT_TRUE(why.empty());
  // cxi matches 48 bits; our tags need all 64.
  EXPECT_FALSE(tagFormatFits(kTagGeneric >> 16, core::tags::kBitsUsed, &why));
  EXPECT_NE(why.find("48 tag bits"), std::string::npos) << why;
  EXPECT_NE(why.find("64 bits"), std::string::npos) << why;
  EXPECT_TRUE(tagFormatFits(kTagGeneric >> 16, (uint64_t{1} << 48) - 1, nullptr));
}

TEST(Proto, LL128OffOnlyWhereOrderingIsMissingAndTheUserSaidNothing) {
  EXPECT_EQ(decideProto(true, nullptr).action, ProtoDecision::Action::kNothing);
  EXPECT_EQ(decideProto(true, "LL128").action, ProtoDecision::Action::kNothing);
  EXPECT_EQ(decideProto(false, nullptr).action, ProtoDecision::Action::kExcludeLL128);
  EXPECT_EQ(decideProto(false, "").action, ProtoDecision::Action::kExcludeLL128);
  EXPECT_EQ(decideProto(false, "Simple").action, ProtoDecision::Action::kNothing);
  EXPECT_EQ(decideProto(false, "LL").action, ProtoDecision::Action::kNothing) << "LL is safe";
  EXPECT_EQ(decideProto(false, "LL,Simple").action, ProtoDecision::Action::kNothing);
  EXPECT_EQ(decideProto(false, "^LL128").action, ProtoDecision::Action::kNothing);
  EXPECT_EQ(decideProto(false, "^LL,LL128").action, ProtoDecision::Action::kNothing);
  ProtoDecision risky = decideProto(false, "Simple,LL128");
  EXPECT_EQ(risky.action, ProtoDecision::Action::kWarnUserSetting);
  EXPECT_NE(risky.message.find("NCCL_PROTO=Simple,LL128"), std::string::npos);
  EXPECT_NE(risky.message.find("NCCL_PROTO=^LL128"), std::string::npos) << "names the remedy";
}

// NCCL's own list syntax (tuning.cc): ';' sections, "function:" prefixes, '^' exclusion (which
// forces on everything it does not name), case-insensitive names.
TEST(Proto, ReadsNcclProtoAsNcclDoes) {
  EXPECT_TRUE(protoMayEnableLL128("LL128"));
  EXPECT_TRUE(protoMayEnableLL128("ll128"));
  EXPECT_TRUE(protoMayEnableLL128("^LL"));
  EXPECT_TRUE(protoMayEnableLL128("^Simple"));
  EXPECT_TRUE(protoMayEnableLL128("Simple;allreduce:LL128"));
  EXPECT_TRUE(protoMayEnableLL128("^LL128;allreduce:LL128"));
  EXPECT_TRUE(protoMayEnableLL128("LL, LL128"));
  EXPECT_FALSE(protoMayEnableLL128("Simple"));
  EXPECT_FALSE(protoMayEnableLL128("LL,Simple"));
  EXPECT_FALSE(protoMayEnableLL128("^LL128"));
  EXPECT_FALSE(protoMayEnableLL128("^ll128,LL"));
  EXPECT_FALSE(protoMayEnableLL128("LL,Simple;allreduce:^LL,LL128"));
}

TEST(Proto, ApplyExcludesLL128OnlyWhenUnset) {
  unsetenv("NCCL_PROTO");
  applyProto(decideProto(false, getenv("NCCL_PROTO")));
  EXPECT_STREQ(getenv("NCCL_PROTO"), "^LL128");
  setenv("NCCL_PROTO", "LL128", 1);
  applyProto(decideProto(false, getenv("NCCL_PROTO")));
  EXPECT_STREQ(getenv("NCCL_PROTO"), "LL128");
  unsetenv("NCCL_PROTO");
}

TEST(DmaBuf, KernelReleasesParse) {
  KernelVersion version;
  ASSERT_TRUE(parseKernelRelease("5.15.0-1051-aws", &version));
  EXPECT_EQ(version.major, 5);
  EXPECT_EQ(version.minor, 15);
  ASSERT_TRUE(parseKernelRelease("6.1", &version));
  EXPECT_EQ(version.major, 6);
  EXPECT_FALSE(parseKernelRelease("garbage", &version));
  EXPECT_FALSE(parseKernelRelease(nullptr, &version));
  EXPECT_GT(runningKernel().major, 0);
}

TEST(DmaBuf, UsedOnlyWhenEveryPartCanDoIt) {
  DmaBufInputs good;
  good.builtWithDmaBuf = true;
  good.runtimeFiVersion = FI_VERSION(2, 1);
  good.providerHmem = true;
  good.cudaDmaBufSupported = true;
  good.kernel = {5, 12};
  EXPECT_TRUE(decideDmaBuf(good).use) << decideDmaBuf(good).reason;

  struct Case {
    void (*spoil)(DmaBufInputs&);
    const char* reason;
  };
  const Case cases[] = {
      {[](DmaBufInputs& in) { in.disabled = true; }, "NCCL_FABRIC_DMABUF=off"},
      {[](DmaBufInputs& in) { in.providerHmem = false; }, "no device memory"},
      {[](DmaBufInputs& in) { in.builtWithDmaBuf = false; }, "without FI_MR_DMABUF"},
      {[](DmaBufInputs& in) { in.runtimeFiVersion = FI_VERSION(1, 19); }, "older than 1.20"},
      {[](DmaBufInputs& in) { in.cudaDmaBufSupported = false; }, "CUDA driver"},
      {[](DmaBufInputs& in) {
         in.kernel = {5, 11};
       },
       "kernel 5.11"},
      {[](DmaBufInputs& in) {
         in.kernel = {4, 19};
       },
       "kernel 4.19"},
  };
  for (const Case& c : cases) {
    DmaBufInputs inputs = good;
    c.spoil(inputs);
    DmaBufDecision decision = decideDmaBuf(inputs);
    EXPECT_FALSE(decision.use) << c.reason;
    EXPECT_NE(decision.reason.find(c.reason), std::string::npos) << decision.reason;
  }
}

}  // namespace
}  // namespace nnf::platform

namespace nnf::platform {
namespace {

ProtocolDecision decide(const std::string& setting, bool offersRma, bool emulated) {
  return decideProtocol({setting, "efa", offersRma, emulated});
}

TEST(ProtocolChoice, AutoRunsRdmaWhereTheDeviceWrites) {
  ProtocolDecision decision = decide("auto", true, false);
  EXPECT_TRUE(decision.rdma);
  EXPECT_FALSE(decision.refused);
  EXPECT_NE(decision.reason.find("NCCL_FABRIC_PROTOCOL=auto"), std::string::npos);
  EXPECT_NE(decision.reason.find("efa"), std::string::npos);
}

TEST(ProtocolChoice, AutoKeepsSendrecvWithoutWritesOrWithEmulatedOnes) {
  for (auto [offers, emulated] : {std::pair{false, false}, {false, true}, {true, true}}) {
    ProtocolDecision decision = decide("auto", offers, emulated);
    EXPECT_FALSE(decision.rdma) << offers << emulated;
    EXPECT_FALSE(decision.refused) << offers << emulated;
    EXPECT_FALSE(decision.reason.empty());
  }
  EXPECT_NE(decide("auto", true, true).reason.find("emulates"), std::string::npos);
  EXPECT_NE(decide("auto", false, false).reason.find("no RMA writes"), std::string::npos);
}

TEST(ProtocolChoice, RdmaAskedForRunsOnEmulatedWritesAndIsRefusedWithoutWrites) {
  ProtocolDecision emulated = decide("rdma", true, true);
  EXPECT_TRUE(emulated.rdma);
  EXPECT_NE(emulated.reason.find("emulated"), std::string::npos);
  EXPECT_TRUE(decide("rdma", true, false).rdma);
  ProtocolDecision none = decide("rdma", false, false);
  EXPECT_FALSE(none.rdma);
  EXPECT_TRUE(none.refused);
}

TEST(ProtocolChoice, SendrecvAskedForIsSendrecvWhateverIsOffered) {
  for (bool offers : {false, true}) {
    ProtocolDecision decision = decide("sendrecv", offers, false);
    EXPECT_FALSE(decision.rdma);
    EXPECT_FALSE(decision.refused);
  }
  EXPECT_FALSE(wantsRma("sendrecv"));
  EXPECT_TRUE(wantsRma("auto"));
  EXPECT_TRUE(wantsRma("rdma"));
}

TEST(ProtocolChoice, OnlyEfaSaysWhetherItsWritesAreEmulated) {
  EXPECT_EQ(rulesFor(Family::kEfa).writesEmulatedOption, opt::kEfaEmulatedWrite);
  EXPECT_EQ(opt::kEfaEmulatedWrite, -(0xefa << 16) + 2);  // FI_OPT_EFA_EMULATED_WRITE
  for (Family family : {Family::kShm, Family::kTcp, Family::kOther}) {
    EXPECT_EQ(rulesFor(family).writesEmulatedOption, 0);
  }
}

}  // namespace
}  // namespace nnf::platform
