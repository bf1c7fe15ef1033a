#include "platform/provider_rules.h"

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext.h>

#include <cinttypes>
#include <cstdio>

namespace nnf::platform {

static_assert(opt::kLevelEndpoint == FI_OPT_ENDPOINT);
static_assert(opt::kEfaRnrRetry == FI_OPT_EFA_RNR_RETRY);
#if NNF_HAVE_FI_OPT_CUDA_API_PERMITTED
static_assert(opt::kCudaApiPermitted == FI_OPT_CUDA_API_PERMITTED);
#endif
#if NNF_HAVE_FI_OPT_SHARED_MEMORY_PERMITTED
static_assert(opt::kSharedMemoryPermitted == FI_OPT_SHARED_MEMORY_PERMITTED);
#endif
#if NNF_HAVE_FI_OPT_EFA_IN_ORDER_ALIGNED_128
static_assert(opt::kEfaSendRecvInOrderAligned128 == FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES);
static_assert(opt::kEfaWriteInOrderAligned128 == FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES);
static_assert(opt::kEfaEmulatedWrite == FI_OPT_EFA_EMULATED_WRITE);
#endif

namespace {

// Facts from libfabric 2.x's efa provider and NCCL 2.28 (docs/efa.md says where each comes from).
const ProviderRules kEfa{
    Family::kEfa,
    {
        {"FI_OPT_CUDA_API_PERMITTED", opt::kLevelEndpoint, opt::kCudaApiPermitted, false,
         When::kHmem, Refusal::kHostMemoryOnly,
         "NCCL's proxy thread must not make CUDA calls inside the provider"},
        {"FI_OPT_SHARED_MEMORY_PERMITTED", opt::kLevelEndpoint, opt::kSharedMemoryPermitted, false,
         When::kReadFlush, Refusal::kNoReadFlush,
         "the GPUDirect flush reads from our own endpoint and must cross the NIC"},
        {"FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES", opt::kLevelEndpoint,
         opt::kEfaSendRecvInOrderAligned128, true, When::kSendRecv, Refusal::kNoLL128,
         "LL128 needs 128-byte aligned in-order delivery of the messages that carry its data"},
        {"FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES", opt::kLevelEndpoint,
         opt::kEfaWriteInOrderAligned128, true, When::kRmaWrite, Refusal::kNoLL128,
         "LL128 needs 128-byte aligned in-order delivery of the RMA writes that carry its data"},
    },
    {
        {"FI_EFA_USE_HUGE_PAGE", "0", "huge-page bounce buffers break fork() and waste memory"},
        {"FI_EFA_FORK_SAFE", "1", "frameworks fork data-loader workers after init"},
    },
    /*unorderedDelivery=*/true,
    /*injectCopiesWithCpu=*/true,
    /*writesEmulatedOption=*/opt::kEfaEmulatedWrite,
    /*eagerMaxBytes=*/8192,
    /*writesWaitForTarget=*/false,
    /*bindEventQueue=*/true,
    /*largestWriteBytes=*/size_t{1} << 30,  // efa_rdm: min(1 GiB, the device's max_rdma_size)
    /*writesMixedMemoryIovs=*/false,
};

// Any other provider opened with FI_HMEM may call CUDA from inside its calls as well.
const std::vector<EndpointOption> kHmemOnly{
    {"FI_OPT_CUDA_API_PERMITTED", opt::kLevelEndpoint, opt::kCudaApiPermitted, false, When::kHmem,
     Refusal::kHostMemoryOnly, "NCCL's proxy thread must not make CUDA calls inside the provider"},
};

// An eager message costs the receiver a copy out of its bounce entry: worth it up to a few
// pages, where waiting for the receive's descriptor costs more. Unknown providers never go eager.
// shm's writes above its inject size (4 KiB) wait for the target: 4 KiB and more took three
// times as long eagerly as by descriptor (inline), docs/performance.md.
const ProviderRules kShm{Family::kShm, kHmemOnly, {}, false, true, 0, 8192, true};
const ProviderRules kTcp{Family::kTcp, kHmemOnly, {}, false, true, 0, 8192};
const ProviderRules kOther{Family::kOther, kHmemOnly, {}, false, true, 0, 0};

bool applies(When when, const EndpointNeeds& needs) {
  switch (when) {
    case When::kAlways:
      return true;
    case When::kHmem:
      return needs.hmem;
    case When::kReadFlush:
      return needs.readFlush;
    case When::kRmaWrite:
      return needs.rmaWrite;
    case When::kSendRecv:
      return needs.sendRecv;
  }
  return false;
}

}  // namespace

Family familyOf(const std::string& provName) {
  std::string core = provName.substr(0, provName.find(';'));
  if (core == "efa") return Family::kEfa;
  if (core == "shm") return Family::kShm;
  if (core == "tcp") return Family::kTcp;
  return Family::kOther;
}

const char* familyName(Family family) {
  switch (family) {
    case Family::kEfa:
      return "efa";
    case Family::kShm:
      return "shm";
    case Family::kTcp:
      return "tcp";
    case Family::kOther:
      return "other";
  }
  return "unknown";
}

const ProviderRules& rulesFor(Family family) {
  switch (family) {
    case Family::kEfa:
      return kEfa;
    case Family::kShm:
      return kShm;
    case Family::kTcp:
      return kTcp;
    case Family::kOther:
      return kOther;
  }
  return kOther;
}

std::vector<EndpointOption> optionsFor(const ProviderRules& rules, const EndpointNeeds& needs) {
  std::vector<EndpointOption> selected;
  for (const EndpointOption& option : rules.options) {
    if (applies(option.when, needs)) selected.push_back(option);
  }
  return selected;
}

uint64_t matchableTagBits(uint64_t memTagFormat) {
  if (memTagFormat == 0) return ~uint64_t{0};
  int width = 64 - __builtin_clzll(memTagFormat);
  return width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
}

bool tagFormatFits(uint64_t memTagFormat, uint64_t bitsUsed, std::string* why) {
  uint64_t matchable = matchableTagBits(memTagFormat);
  if ((bitsUsed & ~matchable) == 0) return true;
  if (why != nullptr) {
    char text[200];
    snprintf(text, sizeof(text),
             "the provider matches %d tag bits (mem_tag_format 0x%" PRIx64
             ") but the plugin's tags use %d bits (mask 0x%" PRIx64 ")",
             64 - __builtin_clzll(matchable), memTagFormat, 64 - __builtin_clzll(bitsUsed),
             bitsUsed);
    *why = text;
  }
  return false;
}

bool wildcardReceivesSafe(Family family, uint32_t fiVersion) {
  return !(family == Family::kShm && FI_MAJOR(fiVersion) < 2);
}

size_t truncationReportLimit(Family family) {
  constexpr size_t kShmInjectSize = 4096;
  return family == Family::kShm ? kShmInjectSize : 0;
}

bool truncatedLongReadsUnsafe(Family family, uint32_t fiVersion) {
  return family == Family::kEfa && fiVersion < FI_VERSION(2, 3);
}

bool postedWritesTakenBackSafely(Family family, uint32_t fiVersion) {
  return family == Family::kEfa && fiVersion >= FI_VERSION(2, 3);
}

bool receivesNeedOverflowRoom(const std::string& provName) {
  return familyOf(provName) == Family::kShm || provName.find("ofi_rxm") != std::string::npos;
}

}  // namespace nnf::platform
