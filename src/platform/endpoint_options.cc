#include "platform/endpoint_options.h"

#include <rdma/fi_errno.h>

#include "log/log.h"

namespace nnf::platform {

OptionVerdict verdictOf(const std::vector<OptionResult>& results) {
  OptionVerdict verdict;
  for (const OptionResult& result : results) {
    if (result.rc == 0) continue;
    switch (result.option.onRefused) {
      case Refusal::kHostMemoryOnly:
        verdict.hostMemoryOnly = true;
        break;
      case Refusal::kNoLL128:
        verdict.noLL128 = true;
        break;
      case Refusal::kNoReadFlush:
        verdict.noReadFlush = true;
        break;
    }
  }
  return verdict;
}

namespace {

const char* costOf(Refusal refusal) {
  switch (refusal) {
    case Refusal::kHostMemoryOnly:
      return "GPU buffers are not offered (host memory only); use a libfabric that supports it "
             "(EFA installer 1.20+) to get GPUDirect RDMA back";
    case Refusal::kNoLL128:
      return "NCCL must not run LL128 over this network (LL and Simple stay); an EFA device "
             "and libfabric whose queues order 128-byte blocks bring it back";
    case Refusal::kNoReadFlush:
      return "GPUDirect flushes do not use RDMA reads (cuFlushGPUDirectRDMAWrites instead, where "
             "the driver has it)";
  }
  return "";
}

}  // namespace

void logOptionResults(const char* deviceName, const std::vector<OptionResult>& results) {
  for (const OptionResult& result : results) {
    const EndpointOption& option = result.option;
    if (result.rc == 0) {
      NNF_INFO(abi::kLogSubsysInit, "%s: set %s=%s (%s)", deviceName, option.name,
               option.value ? "true" : "false", option.why);
    } else if (option.onRefused == Refusal::kNoLL128) {
      // The process-wide decision that follows (NCCL_PROTO) is the one WARN about it.
      NNF_INFO(abi::kLogSubsysInit, "%s: the provider refused %s=%s: %s (%d); %s", deviceName,
               option.name, option.value ? "true" : "false", fi_strerror(-result.rc), result.rc,
               costOf(option.onRefused));
    } else {
      NNF_WARN("%s: the provider refused %s=%s: %s (%d); %s", deviceName, option.name,
               option.value ? "true" : "false", fi_strerror(-result.rc), result.rc,
               costOf(option.onRefused));
    }
  }
}

}  // namespace nnf::platform
