// The domain: wraps the base domain, opened from the base fi_info re-queried by domain name.
// Each of our NICs (efa-<base>-rdm, efa-<base>-rdm-1, ...) opens a base domain of its own.
#include <algorithm>

#include "efa_rules.h"

namespace efa_rules {
namespace {

int closeDomain(fid* f) {
  auto* domain = reinterpret_cast<Domain*>(f);
  writeStats();
  dropHeldWrites(domain);
  int ret = domain->base != nullptr ? fi_close(&domain->base->fid) : 0;
  fi_freeinfo(domain->info);
  delete domain;
  return ret;
}

int controlDomain(fid* f, int command, void* arg) {
  return fi_control(&reinterpret_cast<Domain*>(f)->base->fid, command, arg);
}

fi_ops makeFidOps() {
  fi_ops ops{};
  ops.size = sizeof(ops);
  ops.close = closeDomain;
  nosys(ops.bind);
  ops.control = controlDomain;
  nosys(ops.ops_open);
  nosys(ops.tostr);
  nosys(ops.ops_set);
  return ops;
}

fi_ops_domain makeDomainOps() {
  fi_ops_domain ops{};
  ops.size = sizeof(ops);
  ops.av_open = openAv;
  ops.cq_open = openCq;
  ops.endpoint = openEp;
  nosys(ops.scalable_ep);
  nosys(ops.cntr_open);
  nosys(ops.poll_open);
  nosys(ops.stx_ctx);
  nosys(ops.srx_ctx);
  nosys(ops.query_atomic);
  nosys(ops.query_collective);
  nosys(ops.endpoint2);
  return ops;
}

fi_ops_mr makeMrOps() {
  fi_ops_mr ops{};
  installMrOps(&ops);
  return ops;
}

fi_ops g_fidOps = makeFidOps();
fi_ops_domain g_domainOps = makeDomainOps();
fi_ops_mr g_mrOps = makeMrOps();

}  // namespace

int openDomain(fid_fabric* fabric, fi_info* info, fid_domain** domain, void* context) {
  if (fabric == nullptr || info == nullptr || domain == nullptr) return -FI_EINVAL;
  auto* ourFabric = reinterpret_cast<Fabric*>(fabric);
  Config config = loadConfig();
  fi_info* baseInfo = baseInfoFor(info, config);
  if (baseInfo == nullptr) return -FI_ENODATA;
  int ret = 0;
  fid_fabric* baseFabric = ourFabric->baseFor(baseInfo, &ret);
  fid_domain* base = nullptr;
  if (baseFabric != nullptr) ret = fi_domain(baseFabric, baseInfo, &base, nullptr);
  uint64_t baseMrMode = static_cast<uint64_t>(baseInfo->domain_attr->mr_mode);
  size_t baseCqDataSize = baseInfo->domain_attr->cq_data_size;
  fi_freeinfo(baseInfo);
  if (ret != 0) return ret;

  auto* ours = new (std::nothrow) Domain();
  if (ours == nullptr) {
    fi_close(&base->fid);
    return -FI_ENOMEM;
  }
  ours->fid.fid.fclass = FI_CLASS_DOMAIN;
  ours->fid.fid.context = context;
  ours->fid.fid.ops = &g_fidOps;
  ours->fid.ops = &g_domainOps;
  ours->fid.mr = &g_mrOps;
  ours->fabric = ourFabric;
  ours->base = base;
  ours->info = fi_dupinfo(info);
  ours->baseMrMode = baseMrMode;
  ours->mrLocal = (info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  ours->tagMask = tagMaskOf(info->ep_attr->mem_tag_format);
  ours->name = info->domain_attr->name != nullptr ? info->domain_attr->name : "";
  ours->nic = std::max(nicOf(info->domain_attr->name), 0);
  ours->failsWrites = config.failNic == ours->nic;
  if ((config.holdNics >> ours->nic) & 1u) ours->holdMs = config.holdMs;
  ours->holdReadsMs = std::max(config.holdReadsMs, 0);
  ours->lengthInData = baseCqDataSize >= 8;
  ours->emulatedWrite = config.emulatedWrite;
  ours->emulatePeer = config.emulatePeer;
  ours->handshakeEagain = config.handshakeEagain;
  ours->traffic = trafficOf(ours->name);
  *domain = &ours->fid;
  return 0;
}

}  // namespace efa_rules
