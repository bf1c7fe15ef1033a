// GPUDirect decisions as pure functions: which buffers we offer NCCL (ptrSupport) and how a
// completed receive is made visible to the GPU (iflush).
#pragma once

#include <cstddef>
#include <string>

#include "memory/region.h"

namespace nnf::config {
class Config;
}

namespace nnf::memory {

enum class GdrMode { kAuto, kOff };
enum class FlushSetting { kRead, kCuda, kOff };

GdrMode gdrModeFromConfig(const config::Config& config);
FlushSetting flushSettingFromConfig(const config::Config& config);

struct PtrSupportInputs {
  bool providerHmem = false;      // the provider's fi_info carries FI_HMEM
  bool cudaUsable = false;        // CudaDriver::available()
  bool dmaBuf = false;            // DMA-BUF registration can work here (platform::decideDmaBuf)
  GdrMode mode = GdrMode::kAuto;  // NCCL_FABRIC_GDR
};

struct PtrSupport {
  int bits = 0;        // NCCL_PTR_* bits
  std::string reason;  // one line for the INFO log
};

PtrSupport decidePtrSupport(const PtrSupportInputs& inputs);

enum class FlushMethod {
  kNone,      // nothing to do: iflush returns a NULL request
  kRdmaRead,  // post a small RDMA read from the received buffer into a registered host word
  kCuda,      // call cuFlushGPUDirectRDMAWrites
};

struct FlushInputs {
  MemType type = MemType::kHost;  // memory type of the completed receive's buffer
  size_t bytes = 0;               // bytes received (the largest of a grouped receive)
  FlushSetting setting = FlushSetting::kRead;
  bool providerRead = false;  // the provider offers FI_RMA | FI_READ
  bool cudaFlush = false;     // CudaDriver::hasFlush()
};

struct FlushDecision {
  FlushMethod method = FlushMethod::kNone;
  const char* reason = "";  // static text, usable from the data path without allocating
};

// Pure and allocation-free: the data path may call it for every receive.
FlushDecision decideFlush(const FlushInputs& inputs);

}  // namespace nnf::memory
