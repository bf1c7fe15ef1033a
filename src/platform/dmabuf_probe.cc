#include "platform/dmabuf_probe.h"

#include <rdma/fabric.h>
#include <sys/utsname.h>

#include <cstdio>

namespace nnf::platform {

bool parseKernelRelease(const char* release, KernelVersion* out) {
  int major = 0;
  int minor = 0;
  if (release == nullptr || sscanf(release, "%d.%d", &major, &minor) != 2) return false;
  out->major = major;
  out->minor = minor;
  return true;
}

KernelVersion runningKernel() {
  KernelVersion version;
  utsname name;
  if (uname(&name) == 0) parseKernelRelease(name.release, &version);
  return version;
}

DmaBufDecision decideDmaBuf(const DmaBufInputs& inputs) {
  DmaBufDecision decision;
  // Kernel 5.12 added DMA-BUF import for RDMA; libfabric 1.20 added FI_MR_DMABUF.
  if (inputs.disabled) {
    decision.reason = "DMA-BUF off (NCCL_FABRIC_DMABUF=off)";
  } else if (!inputs.providerHmem) {
    decision.reason = "DMA-BUF unused: the provider takes no device memory";
  } else if (!inputs.builtWithDmaBuf) {
    decision.reason = "DMA-BUF unavailable: built against libfabric headers without FI_MR_DMABUF";
  } else if (inputs.runtimeFiVersion < FI_VERSION(1, 20)) {
    decision.reason = "DMA-BUF unavailable: the libfabric in use is older than 1.20";
  } else if (!inputs.cudaDmaBufSupported) {
    decision.reason = "DMA-BUF unavailable: the CUDA driver does not report DMA-BUF support";
  } else if (inputs.kernel.major < 5 || (inputs.kernel.major == 5 && inputs.kernel.minor < 12)) {
    char text[96];
    snprintf(text, sizeof(text),
             "DMA-BUF unavailable: kernel %d.%d cannot import DMA-BUFs for RDMA (5.12+)",
             inputs.kernel.major, inputs.kernel.minor);
    decision.reason = text;
  } else {
    decision.use = true;
    decision.reason = "DMA-BUF on (libfabric, CUDA driver and kernel support it)";
  }
  return decision;
}

}  // namespace nnf::platform
