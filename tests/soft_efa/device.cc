// Devices: the list, the sysfs tree libfabric's efa provider reads (abi_version, the PCI address
// behind <ibdev_path>/device, the driver behind .../device/driver), open/close and the queries.
#include <errno.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "soft_efa.h"

namespace nnf::softefa {
namespace {

void makeDirs(const std::string& path) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
    mkdir(path.substr(0, at).c_str(), 0755);
  mkdir(path.c_str(), 0755);
}

// Written beside the final name and renamed, so a process reading it never sees half of it;
// several processes may write the same tree at once.
void writeFileAtomically(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp" + std::to_string(getpid());
  FILE* file = std::fopen(temp.c_str(), "we");
  if (file == nullptr) return;
  std::fputs(text.c_str(), file);
  std::fclose(file);
  std::rename(temp.c_str(), path.c_str());
}

void linkAtomically(const std::string& target, const std::string& path) {
  std::string temp = path + ".tmp" + std::to_string(getpid());
  unlink(temp.c_str());
  if (symlink(target.c_str(), temp.c_str()) == 0) std::rename(temp.c_str(), path.c_str());
}

// "rdmap79s0" for 0000:4f:00.0, as udev names an EFA device after its PCI slot.
std::string deviceName(const std::string& pci) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  std::sscanf(pci.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
  std::string name = "rdmap" + std::to_string(bus) + "s" + std::to_string(dev);
  if (fn != 0) name += "f" + std::to_string(fn);
  return name;
}

void writeSysfs(const Device& device, int index) {
  const std::string& root = config().sysfs;
  makeDirs(root + "/class/infiniband_verbs");
  writeFileAtomically(root + "/class/infiniband_verbs/abi_version", "1\n");
  std::string driver = root + "/bus/pci/drivers/efa";
  makeDirs(driver);
  std::string pciDir = root + "/devices/pci0000:00/" + device.pci;
  makeDirs(pciDir);
  char ids[32];
  std::snprintf(ids, sizeof(ids), "0x%04x\n", config().deviceId);
  writeFileAtomically(pciDir + "/vendor", "0x1d0f\n");
  writeFileAtomically(pciDir + "/device", ids);
  linkAtomically(driver, pciDir + "/driver");
  makeDirs(device.ibv.ibdev_path);
  linkAtomically(pciDir, std::string(device.ibv.ibdev_path) + "/device");
  makeDirs(root + "/class/infiniband_verbs/uverbs" + std::to_string(index));
}

uint32_t registrySlot(const std::string& pci) {
  Registry& reg = registry();
  LockGuard guard(reg.lock);
  for (uint32_t i = 0; i < kMaxDevices; ++i)
    if (reg.devices[i].used && pci == reg.devices[i].pci) return i;
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    if (reg.devices[i].used) continue;
    std::snprintf(reg.devices[i].pci, sizeof(reg.devices[i].pci), "%s", pci.c_str());
    reg.devices[i].used = 1;
    return i;
  }
  return kMaxDevices;  // not reached: at most kMaxDevices addresses exist per config
}

// fe80::<namespace hash>:<PCI slot of the registry>: unique per device and namespace.
uint32_t namespaceHash() {
  uint32_t hash = 2166136261u;
  for (char c : config().ns) hash = (hash ^ static_cast<uint8_t>(c)) * 16777619u;
  return hash;
}

ibv_gid makeGid(uint32_t slot) {
  ibv_gid gid;
  std::memset(&gid, 0, sizeof(gid));
  gid.raw[0] = 0xfe;
  gid.raw[1] = 0x80;
  uint32_t hash = namespaceHash();
  std::memcpy(&gid.raw[8], &hash, sizeof(hash));
  gid.raw[12] = 0x1d;
  gid.raw[13] = 0x0f;
  gid.raw[15] = static_cast<uint8_t>(slot);
  return gid;
}

std::vector<Device*> buildDevices() {
  std::vector<Device*> list;
  const Config& cfg = config();
  for (size_t i = 0; i < cfg.pci.size(); ++i) {
    auto* device = new Device();
    device->index = static_cast<int>(i);
    device->pci = cfg.pci[i];
    std::string name = deviceName(device->pci);
    device->ibv.node_type = IBV_NODE_UNSPECIFIED;
    device->ibv.transport_type = IBV_TRANSPORT_UNSPECIFIED;
    std::snprintf(device->ibv.name, sizeof(device->ibv.name), "%s", name.c_str());
    std::snprintf(device->ibv.dev_name, sizeof(device->ibv.dev_name), "uverbs%zu", i);
    std::snprintf(device->ibv.dev_path, sizeof(device->ibv.dev_path),
                  "%s/class/infiniband_verbs/uverbs%zu", cfg.sysfs.c_str(), i);
    std::snprintf(device->ibv.ibdev_path, sizeof(device->ibv.ibdev_path), "%s/class/infiniband/%s",
                  cfg.sysfs.c_str(), name.c_str());
    device->slot = registrySlot(device->pci);
    device->gid = makeGid(device->slot);
    writeSysfs(*device, static_cast<int>(i));
    list.push_back(device);
  }
  // libfabric's efa provider reads abi_version under SYSFS_PATH (else /sys).
  setenv("SYSFS_PATH", cfg.sysfs.c_str(), 0);
  return list;
}

int queryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr, size_t length) {
  if (port != 1) return EINVAL;
  ibv_port_attr out;
  std::memset(&out, 0, sizeof(out));
  out.state = IBV_PORT_ACTIVE;
  out.max_mtu = IBV_MTU_4096;
  out.active_mtu = IBV_MTU_4096;
  out.gid_tbl_len = 1;
  out.max_msg_sz = kMtu;
  out.pkey_tbl_len = 1;
  out.max_vl_num = 1;
  out.phys_state = 5;  // LinkUp
  out.link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  // Four lanes of 25, 50 or 100 Gb/s: 100 Gb/s per NIC up to efa1 (p5), 200 efa2, 400 efa3.
  out.active_width = 2;
  uint32_t generation = config().deviceId & 0xf;
  out.active_speed = generation <= 1 ? 32 : generation == 2 ? 64 : 128;
  std::memcpy(attr, &out, std::min(length, sizeof(out)));
  return 0;
}

int unsupportedPollCq(ibv_cq*, int, ibv_wc*) {
  return -EOPNOTSUPP;  // the provider polls extended CQs only
}

int unsupportedPostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr** bad) {
  return EOPNOTSUPP;  // the provider posts through ibv_qp_ex
}

ibv_cq_ex* createCqEx(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr->comp_mask != 0 || (attr->wc_flags & ~static_cast<uint64_t>(IBV_WC_STANDARD_FLAGS))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Cq* cq = createCq(contextOf(context), static_cast<int>(attr->cqe), attr->wc_flags, 0);
  return cq != nullptr ? &cq->ex : nullptr;
}

ibv_qp* createQpEx(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  // Plain UD (the efa provider's DGRAM endpoints) is not part of this device.
  errno = EOPNOTSUPP;
  return nullptr;
}

}  // namespace

std::vector<Device*>& devices() {
  static std::vector<Device*> list = buildDevices();
  return list;
}

const Device* deviceBySlot(uint32_t slot) {
  for (const Device* device : devices())
    if (device->slot == slot) return device;
  return nullptr;
}

int slotOfGid(const ibv_gid& gid) {
  ibv_gid probe = makeGid(gid.raw[15]);
  if (std::memcmp(probe.raw, gid.raw, sizeof(gid.raw)) != 0) return -1;
  uint32_t slot = gid.raw[15];
  if (slot >= kMaxDevices || !registry().devices[slot].used) return -1;
  return static_cast<int>(slot);
}

void fillDeviceAttr(const Device& device, ibv_device_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "0.0.0.0");
  uint64_t guid = 0x1d0f000000000000ull | (static_cast<uint64_t>(device.slot) << 8);
  attr->node_guid = guid;
  attr->sys_image_guid = guid;
  attr->max_mr_size = 1ull << 40;
  attr->page_size_cap = 0xfffff000;
  attr->vendor_id = 0x1d0f;
  attr->vendor_part_id = config().deviceId;
  attr->hw_ver = config().deviceId;
  attr->max_qp = kMaxQp;
  attr->max_qp_wr = kMaxSqWr;
  attr->max_sge = kMaxSqSge;
  attr->max_sge_rd = kMaxRdmaSge;
  attr->max_cq = kMaxCq;
  attr->max_cqe = kMaxCqe;
  attr->max_mr = kMaxMr;
  attr->max_pd = kMaxPd;
  attr->max_ah = kMaxAh;
  attr->max_pkeys = 1;
  attr->phys_port_cnt = 1;
}

Context* contextOf(ibv_context* context) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(context) -
                                    offsetof(verbs_context, context));
}

}  // namespace nnf::softefa

using namespace nnf::softefa;

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT ibv_device** ibv_get_device_list(int* count) {
  const std::vector<Device*>& list = devices();
  auto** out = static_cast<ibv_device**>(std::calloc(list.size() + 1, sizeof(ibv_device*)));
  if (out == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < list.size(); ++i) out[i] = &list[i]->ibv;
  if (count != nullptr) *count = static_cast<int>(list.size());
  return out;
}

EXPORT void ibv_free_device_list(ibv_device** list) {
  std::free(list);  // the devices themselves live as long as the process
}

EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device->name;
}

EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  ibv_device_attr attr;
  fillDeviceAttr(*reinterpret_cast<Device*>(device), &attr);
  return htobe64(attr.node_guid);
}

EXPORT ibv_context* ibv_open_device(ibv_device* ibvDevice) {
  // A peer reads and writes this process's registered memory with process_vm_readv/writev;
  // where Yama restricts ptrace to ancestors, allow any process of this user.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  dropVotesOfEndedProcesses();
  auto* ctx = new Context();
  ctx->device = reinterpret_cast<Device*>(ibvDevice);
  verbs_context& vctx = ctx->vctx;
  vctx.sz = sizeof(verbs_context);
  vctx.query_port = queryPort;
  vctx.create_cq_ex = createCqEx;
  vctx.create_qp_ex = createQpEx;
  ibv_context& context = vctx.context;
  context.device = ibvDevice;
  context.cmd_fd = -1;
  context.async_fd = -1;
  context.num_comp_vectors = 1;
  pthread_mutex_init(&context.mutex, nullptr);
  context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  context.ops.poll_cq = unsupportedPollCq;
  context.ops.post_send = unsupportedPostSend;
  context.ops.post_recv = postRecv;
  return &context;
}

EXPORT int ibv_close_device(ibv_context* context) {
  Context* ctx = contextOf(context);
  pthread_mutex_destroy(&context->mutex);
  delete ctx;
  return 0;
}

EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  fillDeviceAttr(*contextOf(context)->device, attr);
  return 0;
}

EXPORT int(ibv_query_port)(ibv_context* context, uint8_t port, _compat_ibv_port_attr* attr) {
  // The old layout: ibv_port_attr up to the fields added with port_cap_flags2.
  return queryPort(context, port, reinterpret_cast<ibv_port_attr*>(attr),
                   offsetof(ibv_port_attr, port_cap_flags2));
}

EXPORT int ibv_query_gid(ibv_context* context, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index != 0) return EINVAL;
  *gid = contextOf(context)->device->gid;
  return 0;
}
