// Protection domains and memory regions. A region's key indexes the namespace's MR table, where
// any process finds what the key covers, in which process, device and PD, and where that
// process's CPU reaches it: device memory of the fake CUDA driver is mapped without access at
// the address the program sees, and the driver tells us the second mapping it keeps.
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "soft_efa.h"

namespace nnf::softefa {
namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_RELAXED_ORDERING;

// The fake CUDA driver's answers (tests/fake_cuda), found among the loaded libraries: it is
// loaded by path or as libcuda.so.1/libcudart.so, never linked.
using AliasFn = int (*)(const void*, size_t, void**);
using DmaBufFn = int (*)(int, uint64_t*);

struct FakeCuda {
  AliasFn alias = nullptr;
  DmaBufFn dmaBufStart = nullptr;
};

int findFake(dl_phdr_info* info, size_t, void* data) {
  auto* fake = static_cast<FakeCuda*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  void* handle = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return 0;
  auto alias = reinterpret_cast<AliasFn>(dlsym(handle, "nnfFakeCudaHostAlias"));
  auto start = reinterpret_cast<DmaBufFn>(dlsym(handle, "nnfFakeCudaDmaBufStart"));
  dlclose(handle);  // it stays loaded: whoever loaded it holds it
  if (alias == nullptr) return 0;
  fake->alias = alias;
  fake->dmaBufStart = start;
  return 1;
}

// Found once loaded (whoever loaded it keeps it loaded as long as it can hand out memory); looked
// for again while it is not, as the plugin loads it only when it starts.
FakeCuda fakeCuda() {
  static std::mutex mutex;
  static FakeCuda found;
  std::lock_guard<std::mutex> guard(mutex);
  Dl_info info;
  if (found.alias != nullptr && dladdr(reinterpret_cast<void*>(found.alias), &info) == 0)
    found = FakeCuda();  // unloaded since: a later load may sit elsewhere
  if (found.alias == nullptr) dl_iterate_phdr(findFake, &found);
  return found;
}

// The CPU address of [addr, addr+length): addr itself for host memory, the fake driver's second
// mapping for its device memory. 0 when the range starts in device memory but leaves it.
uint64_t cpuAddressOf(void* addr, size_t length) {
  FakeCuda fake = fakeCuda();
  if (fake.alias == nullptr) return reinterpret_cast<uint64_t>(addr);
  void* alias = nullptr;
  int rc = fake.alias(addr, length, &alias);
  if (rc < 0) return 0;
  return rc == 0 ? reinterpret_cast<uint64_t>(addr) : reinterpret_cast<uint64_t>(alias);
}

Pd* pdOf(ibv_pd* pd) {
  return reinterpret_cast<Pd*>(pd);
}

// Lists a region in the MR table; its key is slot | generation << 16.
Mr* addRegion(ibv_pd* ibvPd, uint64_t iova, uint64_t length, uint64_t alias, int access,
              void* userAddr) {
  if (length == 0 || (access & ~kAllAccess) != 0 ||
      ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  if (access & IBV_ACCESS_REMOTE_WRITE && !config().rdmaWrite) {
    errno = EINVAL;  // a device without RDMA write refuses remote-write access
    return nullptr;
  }
  Context* ctx = contextOf(ibvPd->context);
  Registry& reg = registry();
  auto* mr = new Mr();
  {
    LockGuard guard(reg.lock);
    uint32_t found = kMaxMr;
    for (int pass = 0; pass < 2 && found == kMaxMr; ++pass) {
      for (uint32_t i = 0; i < kMaxMr; ++i) {
        uint32_t slot = (reg.mrHint + i) % kMaxMr;
        MrSlot& entry = reg.mrs[slot];
        if (entry.live && (pass == 0 || processAlive(entry.pid))) continue;
        found = slot;
        break;
      }
    }
    if (found == kMaxMr) {
      delete mr;
      errno = ENOMEM;
      return nullptr;
    }
    MrSlot& entry = reg.mrs[found];
    entry.gen = static_cast<uint16_t>(entry.gen + 1 == 0 ? 1 : entry.gen + 1);
    entry.live = 1;
    entry.pid = getpid();
    entry.device = ctx->device->slot;
    entry.pd = pdOf(ibvPd)->id;
    entry.access = static_cast<uint32_t>(access);
    entry.iova = iova;
    entry.length = length;
    entry.alias = alias;
    reg.mrHint = (found + 1) % kMaxMr;
    mr->slot = found;
    mr->ibv.lkey = mr->ibv.rkey = found | static_cast<uint32_t>(entry.gen) << 16;
  }
  mr->ibv.context = ibvPd->context;
  mr->ibv.pd = ibvPd;
  mr->ibv.addr = userAddr;
  mr->ibv.length = length;
  mr->ibv.handle = mr->slot;
  return mr;
}

bool move(bool write, int pid, const iovec* local, size_t nLocal, const iovec* remote,
          size_t nRemote) {
  // The kernel takes at most IOV_MAX entries and may move less than asked: go on from there.
  size_t want = 0;
  for (size_t i = 0; i < nLocal; ++i) want += local[i].iov_len;
  size_t moved = 0;
  while (moved < want) {
    // Rebuild both lists from `moved` on (a handful of entries: SGEs).
    iovec l[kMaxSqSge + 1], r[kMaxSqSge + 1];
    size_t nl = 0, nr = 0;
    size_t skip = moved;
    for (size_t i = 0; i < nLocal && nl <= kMaxSqSge; ++i) {
      if (skip >= local[i].iov_len) {
        skip -= local[i].iov_len;
        continue;
      }
      l[nl++] = {static_cast<char*>(local[i].iov_base) + skip, local[i].iov_len - skip};
      skip = 0;
    }
    skip = moved;
    for (size_t i = 0; i < nRemote && nr <= kMaxSqSge; ++i) {
      if (skip >= remote[i].iov_len) {
        skip -= remote[i].iov_len;
        continue;
      }
      r[nr++] = {static_cast<char*>(remote[i].iov_base) + skip, remote[i].iov_len - skip};
      skip = 0;
    }
    ssize_t rc =
        write ? process_vm_writev(pid, l, nl, r, nr, 0) : process_vm_readv(pid, l, nl, r, nr, 0);
    if (rc < 0) return false;
    if (rc == 0) {
      errno = EFAULT;
      return false;
    }
    moved += static_cast<size_t>(rc);
  }
  return true;
}

}  // namespace

bool lookupKey(uint32_t key, Region* region) {
  uint32_t slot = key & 0xffff;
  Registry& reg = registry();
  LockGuard guard(reg.lock);
  const MrSlot& entry = reg.mrs[slot];
  if (!entry.live || entry.gen != key >> 16) return false;
  *region = {entry.pid,  entry.device, entry.pd,   entry.access,
             entry.iova, entry.length, entry.alias};
  return true;
}

uint64_t translate(uint32_t key, uint64_t addr, uint64_t length, int pid, uint32_t device,
                   uint32_t pd, uint32_t access) {
  Region region;
  if (!lookupKey(key, &region)) return 0;
  if (region.pid != pid || region.device != device || region.pd != pd) return 0;
  if ((region.access & access) != access) return 0;
  if (addr < region.iova || length > region.length || addr - region.iova > region.length - length)
    return 0;
  return region.alias + (addr - region.iova);
}

bool copyTo(int pid, const iovec* local, size_t nLocal, const iovec* remote, size_t nRemote) {
  return move(true, pid, local, nLocal, remote, nRemote);
}

bool copyFrom(int pid, const iovec* local, size_t nLocal, const iovec* remote, size_t nRemote) {
  return move(false, pid, local, nLocal, remote, nRemote);
}

}  // namespace nnf::softefa

using namespace nnf::softefa;

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto* pd = new Pd();
  pd->ibv.context = context;
  pd->id = static_cast<uint32_t>(newId());
  pd->ibv.handle = pd->id;
  return &pd->ibv;
}

EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  delete reinterpret_cast<Pd*>(pd);
  return 0;
}

EXPORT ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  uint64_t alias = cpuAddressOf(addr, length);
  if (alias == 0) {
    errno = EFAULT;
    return nullptr;
  }
  Mr* mr = addRegion(pd, reinterpret_cast<uint64_t>(addr), length, alias, access, addr);
  return mr != nullptr ? &mr->ibv : nullptr;
}

EXPORT ibv_mr*(ibv_reg_mr_iova)(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  uint64_t alias = cpuAddressOf(addr, length);
  if (alias == 0) {
    errno = EFAULT;
    return nullptr;
  }
  Mr* mr = addRegion(pd, iova, length, alias, access, addr);
  return mr != nullptr ? &mr->ibv : nullptr;
}

EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                unsigned access) {
  return (ibv_reg_mr_iova)(pd, addr, length, iova, static_cast<int>(access));
}

EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                 int access) {
  // The DMA-BUF's memory is mapped here for this device alone (the program's own view of it may
  // have no access). A DMA-BUF of the fake driver may start inside its memfd: it says where.
  uint64_t start = 0;
  FakeCuda fake = fakeCuda();
  if (fake.dmaBufStart != nullptr && fake.dmaBufStart(fd, &start) != 0) start = 0;
  long page = sysconf(_SC_PAGESIZE);
  uint64_t at = start + offset;
  uint64_t lead = at % static_cast<uint64_t>(page);
  size_t mapLength = length + lead;
  void* base = mmap(nullptr, mapLength, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                    static_cast<off_t>(at - lead));
  if (base == MAP_FAILED) return nullptr;  // errno from mmap: not a DMA-BUF we can import
  uint64_t alias = reinterpret_cast<uint64_t>(base) + lead;
  Mr* mr = addRegion(pd, iova, length, alias, access, reinterpret_cast<void*>(iova));
  if (mr == nullptr) {
    int saved = errno;
    munmap(base, mapLength);
    errno = saved;
    return nullptr;
  }
  mr->mapping = base;
  mr->mappingLength = mapLength;
  return &mr->ibv;
}

EXPORT int ibv_dereg_mr(ibv_mr* ibvMr) {
  auto* mr = reinterpret_cast<Mr*>(ibvMr);
  {
    Registry& reg = registry();
    LockGuard guard(reg.lock);
    reg.mrs[mr->slot].live = 0;
  }
  if (mr->mapping != nullptr) munmap(mr->mapping, mr->mappingLength);
  delete mr;
  return 0;
}

EXPORT int nnf_soft_efa_query_mr(ibv_mr* ibvMr, efadv_mr_attr* attr, uint32_t inlen) {
  // One interconnect per device: every id is valid and 0, as on a single-path NIC.
  if (inlen < offsetof(efadv_mr_attr, rdma_recv_ic_id) + sizeof(attr->rdma_recv_ic_id))
    return EINVAL;
  std::memset(attr, 0, inlen);
  attr->ic_id_validity = EFADV_MR_ATTR_VALIDITY_RECV_IC_ID |
                         EFADV_MR_ATTR_VALIDITY_RDMA_READ_IC_ID |
                         EFADV_MR_ATTR_VALIDITY_RDMA_RECV_IC_ID;
  return 0;
}
