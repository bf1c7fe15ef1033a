// The fabric: a name ("efa") and the base fabrics, opened lazily by the domains that need them
// (each of our domains knows its base fabric only once its base fi_info is re-queried).
#include "efa_rules.h"

namespace efa_rules {
namespace {

int closeFabric(fid* f) {
  auto* fabric = reinterpret_cast<Fabric*>(f);
  int ret = 0;
  for (auto& [name, base] : fabric->bases) {
    int closed = fi_close(&base->fid);
    if (closed != 0) ret = closed;
  }
  delete fabric;
  return ret;
}

fi_ops makeFidOps() {
  fi_ops ops{};
  ops.size = sizeof(ops);
  ops.close = closeFabric;
  nosys(ops.bind);
  nosys(ops.control);
  nosys(ops.ops_open);
  nosys(ops.tostr);
  nosys(ops.ops_set);
  return ops;
}

fi_ops_fabric makeFabricOps() {
  fi_ops_fabric ops{};
  ops.size = sizeof(ops);
  ops.domain = openDomain;
  nosys(ops.passive_ep);
  nosys(ops.eq_open);
  nosys(ops.wait_open);
  nosys(ops.trywait);
  nosys(ops.domain2);
  return ops;
}

fi_ops g_fidOps = makeFidOps();
fi_ops_fabric g_fabricOps = makeFabricOps();

}  // namespace

fid_fabric* Fabric::baseFor(const fi_info* baseInfo, int* ret) {
  std::lock_guard<std::mutex> guard(mutex);
  std::string name = baseInfo->fabric_attr->name != nullptr ? baseInfo->fabric_attr->name : "";
  auto found = bases.find(name);
  if (found != bases.end()) return found->second;
  fid_fabric* base = nullptr;
  *ret = fi_fabric(baseInfo->fabric_attr, &base, nullptr);
  if (*ret != 0) return nullptr;
  bases[name] = base;
  return base;
}

int openFabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  if (attr == nullptr || fabric == nullptr) return -FI_EINVAL;
  auto* ours = new (std::nothrow) Fabric();
  if (ours == nullptr) return -FI_ENOMEM;
  ours->fid.fid.fclass = FI_CLASS_FABRIC;
  ours->fid.fid.context = context;
  ours->fid.fid.ops = &g_fidOps;
  ours->fid.ops = &g_fabricOps;
  ours->fid.api_version = attr->api_version;
  *fabric = &ours->fid;
  return 0;
}

}  // namespace efa_rules
