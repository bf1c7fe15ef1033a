// Address handles, fork support, the efadv queries and status strings.
#include <errno.h>

#include <cstring>

#include "soft_efa.h"

namespace nnf::softefa {
namespace {

bool g_forkEnabled = false;

std::array<uint8_t, 16> key(const ibv_gid& gid) {
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), gid.raw, out.size());
  return out;
}

}  // namespace
}  // namespace nnf::softefa

using namespace nnf::softefa;

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!attr->is_global || attr->port_num != 1) {
    errno = EINVAL;  // EFA addresses peers by GID only
    return nullptr;
  }
  Context* ctx = contextOf(pd->context);
  auto* ah = new Ah();
  ah->ibv.context = pd->context;
  ah->ibv.pd = pd;
  ah->gid = attr->grh.dgid;
  // A GID of no device here is accepted, as a NIC cannot tell; sends to it fail.
  ah->target = slotOfGid(ah->gid);
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  auto [entry, inserted] = ctx->ahs.try_emplace(key(ah->gid), ctx->nextAhn, 0);
  if (inserted) {
    ++ctx->nextAhn;
    if (ctx->nextAhn == kUnknownAh) ctx->nextAhn = 1;
  }
  ++entry->second.second;
  ah->ahn = entry->second.first;
  ah->ibv.handle = ah->ahn;
  return &ah->ibv;
}

EXPORT int ibv_destroy_ah(ibv_ah* ibvAh) {
  auto* ah = reinterpret_cast<Ah*>(ibvAh);
  Context* ctx = contextOf(ibvAh->context);
  Process& proc = process();
  std::lock_guard<std::recursive_mutex> guard(proc.mutex);
  auto entry = ctx->ahs.find(key(ah->gid));
  if (entry != ctx->ahs.end() && --entry->second.second == 0) ctx->ahs.erase(entry);
  delete ah;
  return 0;
}

EXPORT int nnf_soft_efa_query_ah(ibv_ah* ibvAh, efadv_ah_attr* attr, uint32_t inlen) {
  if (inlen < offsetof(efadv_ah_attr, ahn) + sizeof(attr->ahn)) return EINVAL;
  std::memset(attr, 0, inlen);
  attr->ahn = reinterpret_cast<Ah*>(ibvAh)->ahn;
  return 0;
}

EXPORT int nnf_soft_efa_query_device(ibv_context*, efadv_device_attr* attr, uint32_t inlen) {
  // Field by field as far as the caller's struct reaches (rdma-core's vext_field_avail).
  auto reaches = [inlen](size_t offset, size_t size) { return inlen >= offset + size; };
  if (!reaches(offsetof(efadv_device_attr, inline_buf_size), sizeof(attr->inline_buf_size)))
    return EINVAL;
  const Config& cfg = config();
  std::memset(attr, 0, inlen);
  attr->max_sq_wr = kMaxSqWr;
  attr->max_rq_wr = kMaxRqWr;
  attr->max_sq_sge = kMaxSqSge;
  attr->max_rq_sge = kMaxRqSge;
  attr->inline_buf_size = kInlineSize;
  if (reaches(offsetof(efadv_device_attr, device_caps), sizeof(attr->device_caps))) {
    attr->device_caps = EFADV_DEVICE_ATTR_CAPS_RNR_RETRY | EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID;
    if (cfg.unsolicitedWrite) attr->device_caps |= EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV;
  }
  if (reaches(offsetof(efadv_device_attr, max_rdma_size), sizeof(attr->max_rdma_size))) {
    attr->max_rdma_size = cfg.maxRdmaSize;
    if (cfg.rdmaRead) attr->device_caps |= EFADV_DEVICE_ATTR_CAPS_RDMA_READ;
    if (cfg.rdmaWrite) attr->device_caps |= EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE;
  }
  return 0;
}

EXPORT int ibv_fork_init() {
  g_forkEnabled = true;
  return 0;
}

EXPORT ibv_fork_status ibv_is_fork_initialized() {
  if (config().forkUnneeded) return IBV_FORK_UNNEEDED;
  return g_forkEnabled ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {"success",
                                       "local length error",
                                       "local QP operation error",
                                       "local EE context operation error",
                                       "local protection error",
                                       "Work Request Flushed Error",
                                       "memory management operation error",
                                       "bad response error",
                                       "local access error",
                                       "remote invalid request error",
                                       "remote access error",
                                       "remote operation error",
                                       "transport retry counter exceeded",
                                       "RNR retry counter exceeded",
                                       "local RDD violation error",
                                       "remote invalid RD request",
                                       "aborted error",
                                       "invalid EE context number",
                                       "invalid EE context state",
                                       "fatal error",
                                       "response timeout error",
                                       "general error",
                                       "TM error",
                                       "TM rendezvous error"};
  if (status < 0 || static_cast<size_t>(status) >= sizeof(kNames) / sizeof(kNames[0]))
    return "unknown";
  return kNames[status];
}
