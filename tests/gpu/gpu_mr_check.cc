// GPU check for the memory layer, run by tests/gpu/run.sh on a machine with an NVIDIA GPU:
// real libcuda through CudaDriver, cuMemAlloc'd buffers classified and registered with the
// shm / tcp providers through FabricRegistrar and MrCache. Prints one line per check; exits 1
// only when something that must work fails (a provider without CUDA support is reported, not
// failed).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "memory/cuda_driver.h"
#include "memory/gdr_policy.h"

#if NNF_GPU_CHECK_FABRIC
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "memory/fabric_registrar.h"
#include "memory/mr_cache.h"
#include "platform/dmabuf_probe.h"
#include "platform/provider_rules.h"
#endif

using namespace nnf::memory;

namespace {

int g_failures = 0;
const CudaDriver* g_driver = nullptr;

void report(bool ok, const std::string& what) {
  printf("%s %s\n", ok ? "[ OK ]" : "[FAIL]", what.c_str());
  if (!ok) ++g_failures;
}

void note(const std::string& what) {
  printf("[NOTE] %s\n", what.c_str());
}

// The allocation calls the plugin never needs, resolved here only for the check.
struct CudaAlloc {
  int (*deviceGet)(int*, int) = nullptr;
  int (*deviceGetCount)(int*) = nullptr;
  int (*primaryCtxRetain)(void**, int) = nullptr;
  int (*ctxSetCurrent)(void*) = nullptr;
  int (*memAlloc)(unsigned long long*, size_t) = nullptr;
  int (*memFree)(unsigned long long) = nullptr;

  bool load() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return false;
    deviceGet = reinterpret_cast<decltype(deviceGet)>(dlsym(lib, "cuDeviceGet"));
    deviceGetCount = reinterpret_cast<decltype(deviceGetCount)>(dlsym(lib, "cuDeviceGetCount"));
    primaryCtxRetain =
        reinterpret_cast<decltype(primaryCtxRetain)>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
    ctxSetCurrent = reinterpret_cast<decltype(ctxSetCurrent)>(dlsym(lib, "cuCtxSetCurrent"));
    memAlloc = reinterpret_cast<decltype(memAlloc)>(dlsym(lib, "cuMemAlloc_v2"));
    memFree = reinterpret_cast<decltype(memFree)>(dlsym(lib, "cuMemFree_v2"));
    return deviceGet && deviceGetCount && primaryCtxRetain && ctxSetCurrent && memAlloc && memFree;
  }
};

#if NNF_GPU_CHECK_FABRIC
void checkProvider(const char* provider, void* gpuBuffer, size_t size, int ordinal) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_HMEM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_HMEM;
  hints->fabric_attr->prov_name = strdup(provider);
  fi_info* info = nullptr;
  int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  if (rc != 0) {
    note(std::string(provider) + ": this libfabric offers no FI_HMEM RDM endpoint (" +
         fi_strerror(-rc) + "): it cannot register CUDA memory with this provider");
    return;
  }
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  if (fi_fabric(info->fabric_attr, &fabric, nullptr) != 0 ||
      fi_domain(fabric, info, &domain, nullptr) != 0) {
    report(false, std::string(provider) + ": opening the fabric/domain failed");
    fi_freeinfo(info);
    return;
  }
  // The plugin offers GPU buffers only where the endpoint accepts a ban on CUDA calls from
  // inside the provider (NCCL's proxy thread); set before enable, as the plugin does.
  bool cudaCallsBanned = false;
  fid_ep* ep = nullptr;
  if (fi_endpoint(domain, info, &ep, nullptr) == 0) {
    bool permitted = false;
    rc = fi_setopt(&ep->fid, FI_OPT_ENDPOINT, nnf::platform::opt::kCudaApiPermitted, &permitted,
                   sizeof(permitted));
    cudaCallsBanned = rc == 0;
    note(std::string(provider) + ": FI_OPT_CUDA_API_PERMITTED=false " +
         (rc == 0 ? "accepted: GPU buffers can be offered"
                  : std::string("refused (") + fi_strerror(-rc) +
                        "): the plugin offers host memory only on this provider"));
    fi_close(&ep->fid);
  }
  nnf::fabric::DomainLock lock;
  {
    FabricRegistrar registrar(domain, info, lock);
    nnf::platform::DmaBufInputs dmaBufInputs;
    dmaBufInputs.builtWithDmaBuf = NNF_HAVE_FI_MR_DMABUF != 0;
    dmaBufInputs.runtimeFiVersion = fi_version();
    dmaBufInputs.providerHmem = registrar.providerHasHmem();
    dmaBufInputs.cudaDmaBufSupported = g_driver->dmaBufSupported(ordinal);
    dmaBufInputs.kernel = nnf::platform::runningKernel();
    nnf::platform::DmaBufDecision dmaBuf = nnf::platform::decideDmaBuf(dmaBufInputs);
    note(std::string(provider) + ": " + dmaBuf.reason);
    PtrSupportInputs inputs;
    inputs.providerHmem = registrar.providerHasHmem() && cudaCallsBanned;
    inputs.cudaUsable = true;
    inputs.dmaBuf = dmaBuf.use;
    PtrSupport support = decidePtrSupport(inputs);
    note(std::string(provider) + ": ptrSupport=" + std::to_string(support.bits) + " (" +
         support.reason + ")");
    Region region;
    region.base = gpuBuffer;
    region.length = size;
    region.type = MemType::kCuda;
    region.device = ordinal;
    region.access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    Registration registration;
    rc = registrar.registerRegion(region, &registration);
    if (rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP) {
      note(std::string(provider) + ": this libfabric build has no CUDA support for the provider (" +
           fi_strerror(-rc) + "): GPUDirect unavailable with it");
    } else {
      report(rc == 0, std::string(provider) + ": FI_HMEM_CUDA registration of " +
                          std::to_string(size) + " bytes: " + (rc == 0 ? "ok" : fi_strerror(-rc)));
      if (rc == 0) {
        printf("       key=0x%llx desc=%p\n", static_cast<unsigned long long>(registration.key),
               registration.desc);
        report(registrar.deregister(registration) == 0, std::string(provider) + ": deregistration");
        MrCache cache(registrar, MrCacheOptions{});
        MrHandle* whole = nullptr;
        MrHandle* part = nullptr;
        Region sub = region;
        sub.base = static_cast<char*>(gpuBuffer) + 4096;
        sub.length = 8192;
        bool ok = cache.acquire(region, &whole) == 0 && cache.acquire(sub, &part) == 0 &&
                  whole == part && cache.stats().hits == 1;
        report(ok, std::string(provider) + ": MR cache sub-range hit on GPU memory");
        if (whole != nullptr) cache.release(whole);
        if (part != nullptr) cache.release(part);
      }
    }
#if NNF_HAVE_FI_MR_DMABUF
    // A DMA-BUF registration that starts 64 KiB into the exported buffer: base_addr is where
    // the DMA-BUF starts, offset the registration's place in it. A refusal is what the plugin
    // falls back from (by address, once).
    int fd = -1;
    if (dmaBuf.use && g_driver->dmaBufFd(gpuBuffer, size, &fd) == 0) {
      Region viaFd;
      viaFd.base = static_cast<char*>(gpuBuffer) + (64 << 10);
      viaFd.length = 1 << 20;
      viaFd.type = MemType::kDmaBuf;
      viaFd.device = ordinal;
      viaFd.dmabufFd = fd;
      viaFd.dmabufOffset = 64 << 10;
      viaFd.access = FI_SEND | FI_RECV | FI_REMOTE_READ;
      Registration registration;
      rc = registrar.registerRegion(viaFd, &registration);
      if (rc == 0) {
        report(true, std::string(provider) + ": DMA-BUF registration at offset 64 KiB");
        registrar.deregister(registration);
      } else {
        note(std::string(provider) + ": DMA-BUF registration refused (" + fi_strerror(-rc) +
             "): the plugin falls back to registration by address once, with one WARN");
      }
      close(fd);
    }
#endif
  }
  fi_close(&domain->fid);
  fi_close(&fabric->fid);
  fi_freeinfo(info);
}
#endif

}  // namespace

int main() {
  CudaDriver driver;
  g_driver = &driver;
  printf("CUDA: %s\n", driver.reason().c_str());
  report(driver.available(), "CUDA driver loads through dlopen and cuInit succeeds");
  if (!driver.available()) return 1;

  CudaAlloc alloc;
  if (!alloc.load()) {
    report(false, "resolving cuDeviceGet/cuMemAlloc_v2 for the check");
    return 1;
  }
  int count = 0, device = 0;
  void* context = nullptr;
  alloc.deviceGetCount(&count);
  report(count > 0, "GPUs visible: " + std::to_string(count));
  if (count == 0 || alloc.deviceGet(&device, count - 1) != 0 ||
      alloc.primaryCtxRetain(&context, device) != 0 || alloc.ctxSetCurrent(context) != 0) {
    report(false, "creating a context on the last GPU");
    return 1;
  }
  const int ordinal = count - 1;
  const size_t size = 4 << 20;
  unsigned long long gpu = 0;
  report(alloc.memAlloc(&gpu, size) == 0, "cuMemAlloc of 4 MiB");
  void* gpuBuffer = reinterpret_cast<void*>(gpu);

  PointerInfo info;
  int rc = driver.pointerInfo(static_cast<char*>(gpuBuffer) + 1000, &info);
  report(rc == 0 && info.device && info.ordinal == ordinal,
         "device pointer classified as CUDA memory of ordinal " + std::to_string(info.ordinal) +
             " (want " + std::to_string(ordinal) + ")");
  std::vector<char> host(4096);
  rc = driver.pointerInfo(host.data(), &info);
  report(rc == 0 && !info.device && info.ordinal == -1, "malloc'd pointer classified as host");

  if (driver.hasFlush()) {
    rc = driver.flushGdrWrites();
    report(rc == 0, "cuFlushGPUDirectRDMAWrites returns " + std::to_string(rc));
  } else {
    note("driver lacks cuFlushGPUDirectRDMAWrites: NCCL_FABRIC_GDR_FLUSH=cuda falls back");
  }
  if (driver.hasDmaBufExport()) {
    int fd = -1;
    rc = driver.dmaBufFd(gpuBuffer, size, &fd);
    if (rc == 0) {
      report(fd >= 0, "DMA-BUF export of the buffer gives fd " + std::to_string(fd));
      close(fd);
    } else {
      note("DMA-BUF export refused by the driver/kernel (CUDA error " + std::to_string(rc) +
           "): NCCL will not use regMrDmaBuf here");
    }
  }

#if NNF_GPU_CHECK_FABRIC
  setenv("FI_TCP_IFACE", "lo", 0);
  checkProvider("shm", gpuBuffer, size, ordinal);
  checkProvider("tcp", gpuBuffer, size, ordinal);
#else
  note("built without libfabric: provider registration checks skipped");
#endif
  alloc.memFree(gpu);
  printf("%s: %d failure(s)\n", g_failures == 0 ? "PASS" : "FAIL", g_failures);
  return g_failures == 0 ? 0 : 1;
}
