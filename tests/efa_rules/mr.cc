// Memory registration: every buffer is registered with the base as host memory (the "GPU"
// buffers of the tests are host memory the fake CUDA driver calls device memory), except with
// NNF_EFA_RULES_HMEM_BASE=1, where device memory is real and goes to the base as such; we remember
// the range and whether it was registered as device memory, and hand out our own fid_mr whose
// descriptor is that record, so posts can be checked and translated.
#include <sys/uio.h>

#include <atomic>
#include <cstring>

#include "efa_rules.h"

namespace efa_rules {
namespace {

std::mutex g_mutex;
std::set<Mr*> g_live;
// Far from the small keys the base provider hands its own internal registrations (rxm counts
// from 0): a collision would answer -FI_ENOKEY.
constexpr uint64_t kKeyBase = uint64_t{0xefa} << 40;
std::atomic<uint64_t> g_nextKey{kKeyBase};
constexpr int kStartBits = 47;  // user-space addresses on x86-64 and arm64
// With several NICs, a key index carries its NIC above 14 bits of count (an index has 17 bits
// beside a 47-bit start), so that a peer can tell which NIC's domain a key belongs to; each NIC
// counts on its own and wraps (a wrapped key still live is skipped).
constexpr int kNicShift = 14;
constexpr uint64_t kCountMask = (uint64_t{1} << kNicShift) - 1;
std::atomic<uint64_t> g_nicCount[kMaxNics];

uint64_t nextKey(const Domain* domain, int nics) {
  if (nics == 1) return g_nextKey++;
  uint64_t count = g_nicCount[domain->nic]++ & kCountMask;
  return kKeyBase + ((static_cast<uint64_t>(domain->nic) << kNicShift) | count);
}

int closeMr(fid* f) {
  auto* mr = reinterpret_cast<Mr*>(f);
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    g_live.erase(mr);
  }
  int ret = fi_close(&mr->base->fid);
  delete mr;
  return ret;
}

// The base fid of one of our objects that an MR can be bound to.
fid* baseFid(fid* f) {
  if (f == nullptr) return nullptr;
  switch (f->fclass) {
    case FI_CLASS_EP:
      return &reinterpret_cast<Ep*>(f)->base->fid;
    case FI_CLASS_CQ:
      return &reinterpret_cast<Cq*>(f)->base->fid;
    case FI_CLASS_AV:
      return &reinterpret_cast<Av*>(f)->base->fid;
    default:
      return nullptr;
  }
}

int bindMr(fid* f, fid* bfid, uint64_t flags) {
  fid* base = baseFid(bfid);
  if (base == nullptr) return -FI_EINVAL;
  return fi_mr_bind(reinterpret_cast<Mr*>(f)->base, base, flags);
}

int controlMr(fid* f, int command, void* arg) {
  return fi_control(&reinterpret_cast<Mr*>(f)->base->fid, command, arg);
}

fi_ops makeFidOps() {
  fi_ops ops{};
  ops.size = sizeof(ops);
  ops.close = closeMr;
  ops.bind = bindMr;
  ops.control = controlMr;
  nosys(ops.ops_open);
  nosys(ops.tostr);
  nosys(ops.ops_set);
  return ops;
}

fi_ops g_fidOps = makeFidOps();

int regAttr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr) {
  if (attr == nullptr || mr == nullptr) return -FI_EINVAL;
  auto* domain = reinterpret_cast<Domain*>(f);
  fi_mr_attr baseAttr = *attr;
  iovec range{};
  bool device = attr->iface == FI_HMEM_CUDA;
#ifdef FI_MR_DMABUF
  if (flags & FI_MR_DMABUF) {
    // Like a kernel that cannot import DMA-BUFs for RDMA, unless told otherwise.
    if (!loadConfig().dmabuf) return -FI_EOPNOTSUPP;
    const fi_mr_dmabuf* dmabuf = attr->dmabuf;
    if (dmabuf == nullptr || dmabuf->len == 0) return -FI_EINVAL;
    auto* start = static_cast<char*>(dmabuf->base_addr) + dmabuf->offset;
    if (!driverSaysDevice(start) || !driverSaysDevice(start + dmabuf->len - 1)) {
      char detail[160];
      std::snprintf(detail, sizeof(detail),
                    "DMA-BUF range base_addr %p + offset %llu, %zu bytes is not device memory",
                    dmabuf->base_addr, static_cast<unsigned long long>(dmabuf->offset),
                    dmabuf->len);
      violation(Rule::kDmabufRange, detail);
      return -FI_EINVAL;
    }
    range.iov_base = start;
    range.iov_len = dmabuf->len;
    baseAttr.mr_iov = &range;
    baseAttr.iov_count = 1;
    flags &= ~FI_MR_DMABUF;
    device = true;
  } else
#endif
  {
    if (attr->mr_iov == nullptr || attr->iov_count == 0) return -FI_EINVAL;
    range = attr->mr_iov[0];
  }
  // A base without provider keys or virtual addresses (tcp;ofi_rxm on 1.17): unique keys from
  // us, and an offset equal to the address so that offsets are virtual addresses.
  uint64_t key = 0;
  const bool ownKeys = !(domain->baseMrMode & FI_MR_PROV_KEY);
  const int nics = loadConfig().nics;
  if (ownKeys) baseAttr.requested_key = key = nextKey(domain, nics);
  // Without virtual addresses the base (tcp on 1.17) takes a remote address as an offset from the
  // region's start, whatever offset we register: our key carries that start to the initiator.
  bool offsets = !(domain->baseMrMode & FI_MR_VIRT_ADDR);
  if (offsets) baseAttr.offset = 0;
  // Device memory keeps its interface and device only where the base takes real GPU memory.
  if (!(device && loadConfig().hmemBase)) {
    baseAttr.iface = FI_HMEM_SYSTEM;
    std::memset(&baseAttr.device, 0, sizeof(baseAttr.device));
  }
  fid_mr* base = nullptr;
  int ret = fi_mr_regattr(domain->base, &baseAttr, flags, &base);
  // A NIC's count wrapped onto a key still registered: take the next ones.
  for (int tries = 0; ret == -FI_ENOKEY && ownKeys && nics > 1 && tries < 64; ++tries) {
    baseAttr.requested_key = key = nextKey(domain, nics);
    ret = fi_mr_regattr(domain->base, &baseAttr, flags, &base);
  }
  if (ret != 0) return ret;

  auto* ours = new (std::nothrow) Mr();
  if (ours == nullptr) {
    fi_close(&base->fid);
    return -FI_ENOMEM;
  }
  ours->fid.fid.fclass = FI_CLASS_MR;
  ours->fid.fid.context = attr->context;
  ours->fid.fid.ops = &g_fidOps;
  ours->fid.mem_desc = ours;
  ours->fid.key = base->key;
  if (offsets && key != 0)
    ours->fid.key = ((key - kKeyBase) << kStartBits) | reinterpret_cast<uintptr_t>(range.iov_base);
  ours->base = base;
  ours->start = reinterpret_cast<uintptr_t>(range.iov_base);
  ours->end = ours->start + range.iov_len;
  ours->device = device;
  if (attr->iface == FI_HMEM_CUDA) ours->deviceId = attr->device.cuda;
  ours->domain = domain;
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    g_live.insert(ours);
  }
  *mr = &ours->fid;
  return 0;
}

int regv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
         uint64_t requestedKey, uint64_t flags, fid_mr** mr, void* context) {
  fi_mr_attr attr{};
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = requestedKey;
  attr.context = context;
  attr.iface = FI_HMEM_SYSTEM;
  return regAttr(f, &attr, flags, mr);
}

int reg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset,
        uint64_t requestedKey, uint64_t flags, fid_mr** mr, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return regv(f, &iov, 1, access, offset, requestedKey, flags, mr, context);
}

}  // namespace

void installMrOps(fi_ops_mr* ops) {
  ops->size = sizeof(*ops);
  ops->reg = reg;
  ops->regv = regv;
  ops->regattr = regAttr;
}

void baseRmaTarget(const Domain* domain, uint64_t* addr, uint64_t* key) {
  if (domain->baseMrMode & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY)) return;
  uint64_t start = *key & ((uint64_t{1} << kStartBits) - 1);
  *addr -= start;
  *key = kKeyBase + (*key >> kStartBits);
}

int nicOfKey(const Domain* domain, uint64_t key) {
  if (loadConfig().nics == 1 || (domain->baseMrMode & FI_MR_PROV_KEY)) return -1;
  uint64_t index = 0;
  if (domain->baseMrMode & FI_MR_VIRT_ADDR) {
    if (key < kKeyBase) return -1;
    index = key - kKeyBase;
  } else {
    index = key >> kStartBits;
  }
  uint64_t nic = index >> kNicShift;
  return nic < kMaxNics ? static_cast<int>(nic) : -1;
}

Mr* liveMr(void* desc) {
  std::lock_guard<std::mutex> guard(g_mutex);
  auto found = g_live.find(static_cast<Mr*>(desc));
  return found != g_live.end() ? *found : nullptr;
}

bool registeredAsDevice(const void* p, size_t len) {
  auto start = reinterpret_cast<uintptr_t>(p);
  uintptr_t end = start + (len > 0 ? len : 1);
  std::lock_guard<std::mutex> guard(g_mutex);
  for (const Mr* mr : g_live) {
    if (mr->device && start < mr->end && end > mr->start) return true;
  }
  return false;
}

}  // namespace efa_rules
