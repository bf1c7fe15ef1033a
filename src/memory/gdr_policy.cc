#include "memory/gdr_policy.h"

#include "nccl_net/types.h"
#include "config/config.h"

namespace nnf::memory {

GdrMode gdrModeFromConfig(const config::Config& config) {
  return config.string(config::Param::kGdr) == "off" ? GdrMode::kOff : GdrMode::kAuto;
}

FlushSetting flushSettingFromConfig(const config::Config& config) {
  const std::string& text = config.string(config::Param::kGdrFlush);
  if (text == "cuda") return FlushSetting::kCuda;
  if (text == "off") return FlushSetting::kOff;
  return FlushSetting::kRead;
}

PtrSupport decidePtrSupport(const PtrSupportInputs& inputs) {
  PtrSupport result;
  result.bits = abi::kPtrHost;
  if (inputs.mode == GdrMode::kOff) {
    result.reason = "GPUDirect RDMA off (NCCL_FABRIC_GDR=off): host memory only";
  } else if (!inputs.providerHmem) {
    result.reason = "GPUDirect RDMA unavailable: the provider does not offer FI_HMEM";
  } else if (!inputs.cudaUsable) {
    result.reason = "GPUDirect RDMA unavailable: the CUDA driver is not usable";
  } else {
    result.bits |= abi::kPtrCuda;
    if (inputs.dmaBuf) {
      result.bits |= abi::kPtrDmaBuf;
      result.reason = "GPUDirect RDMA on: CUDA buffers and DMA-BUF";
    } else {
      result.reason = "GPUDirect RDMA on: CUDA buffers registered by address (no DMA-BUF)";
    }
  }
  return result;
}

FlushDecision decideFlush(const FlushInputs& inputs) {
  if (inputs.type == MemType::kHost) return {FlushMethod::kNone, "host memory needs no flush"};
  if (inputs.bytes == 0) return {FlushMethod::kNone, "nothing was received"};
  switch (inputs.setting) {
    case FlushSetting::kOff:
      return {FlushMethod::kNone, "flush disabled (NCCL_FABRIC_GDR_FLUSH=off)"};
    case FlushSetting::kCuda:
      if (inputs.cudaFlush) return {FlushMethod::kCuda, "cuFlushGPUDirectRDMAWrites"};
      if (inputs.providerRead) {
        return {FlushMethod::kRdmaRead,
                "RDMA read (the CUDA driver lacks cuFlushGPUDirectRDMAWrites)"};
      }
      return {FlushMethod::kNone, "no flush possible: no CUDA flush call and no RDMA read"};
    case FlushSetting::kRead:
      if (inputs.providerRead) return {FlushMethod::kRdmaRead, "RDMA read"};
      if (inputs.cudaFlush) {
        return {FlushMethod::kCuda, "cuFlushGPUDirectRDMAWrites (the provider lacks RDMA read)"};
      }
      return {FlushMethod::kNone, "no flush possible: no RDMA read and no CUDA flush call"};
  }
  return {FlushMethod::kNone, "unknown flush setting"};
}

}  // namespace nnf::memory
