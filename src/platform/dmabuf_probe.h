// Whether DMA-BUF registration can work here: libfabric that knows FI_MR_DMABUF (build and
// run time), a CUDA driver that exports DMA-BUFs, and a kernel that imports them for RDMA.
#pragma once

#include <cstdint>
#include <string>

namespace nnf::platform {

struct KernelVersion {
  int major = 0;
  int minor = 0;
};
// Parses uname's release ("5.15.0-1051-aws"); false when it has no major.minor.
bool parseKernelRelease(const char* release, KernelVersion* out);
KernelVersion runningKernel();

struct DmaBufInputs {
  bool builtWithDmaBuf = false;      // the headers know FI_MR_DMABUF
  uint32_t runtimeFiVersion = 0;     // fi_version()
  bool providerHmem = false;         // the endpoint takes device memory at all
  bool cudaDmaBufSupported = false;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
  KernelVersion kernel;
  bool disabled = false;  // NCCL_FABRIC_DMABUF=off
};

struct DmaBufDecision {
  bool use = false;
  std::string reason;  // one line for the INFO log
};

DmaBufDecision decideDmaBuf(const DmaBufInputs& inputs);

}  // namespace nnf::platform
