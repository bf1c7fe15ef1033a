// The address vector: forwards to the base AV; fi_addr_t values are the base's, unchanged, so
// completions' source addresses need no translation. With several NICs it also learns which NIC
// each address belongs to (addresses.cc), for the remote-key-domain rule.
#include "efa_rules.h"
#include "link.h"

namespace efa_rules {
namespace {

fid_av* baseOf(fid_av* av) {
  return reinterpret_cast<Av*>(av)->base;
}

int closeAv(fid* f) {
  auto* av = reinterpret_cast<Av*>(f);
  int ret = fi_close(&av->base->fid);
  delete av;
  return ret;
}

int insert(fid_av* av, const void* addr, size_t count, fi_addr_t* fiAddr, uint64_t flags,
           void* context) {
  return fi_av_insert(baseOf(av), addr, count, fiAddr, flags, context);
}

int removeAddr(fid_av* av, fi_addr_t* fiAddr, size_t count, uint64_t flags) {
  auto* ours = reinterpret_cast<Av*>(av);
  {
    // The base may hand the same fi_addr_t to the next address inserted.
    std::lock_guard<std::mutex> guard(ours->mutex);
    for (size_t i = 0; fiAddr != nullptr && i < count; ++i) ours->nics.erase(fiAddr[i]);
  }
  for (size_t i = 0; fiAddr != nullptr && i < count; ++i) forgetWithheld(ours, fiAddr[i]);
  return fi_av_remove(baseOf(av), fiAddr, count, flags);
}

int lookup(fid_av* av, fi_addr_t fiAddr, void* addr, size_t* addrlen) {
  return fi_av_lookup(baseOf(av), fiAddr, addr, addrlen);
}

const char* straddr(fid_av* av, const void* addr, char* buf, size_t* len) {
  return fi_av_straddr(baseOf(av), addr, buf, len);
}

fi_ops makeFidOps() {
  fi_ops ops{};
  ops.size = sizeof(ops);
  ops.close = closeAv;
  nosys(ops.bind);
  nosys(ops.control);
  nosys(ops.ops_open);
  nosys(ops.tostr);
  nosys(ops.ops_set);
  return ops;
}

fi_ops_av makeAvOps() {
  fi_ops_av ops{};
  ops.size = sizeof(ops);
  ops.insert = insert;
  nosys(ops.insertsvc);
  nosys(ops.insertsym);
  ops.remove = removeAddr;
  ops.lookup = lookup;
  ops.straddr = straddr;
  nosys(ops.av_set);
  return ops;
}

fi_ops g_fidOps = makeFidOps();
fi_ops_av g_avOps = makeAvOps();

}  // namespace

int nicOfPeer(Av* av, fi_addr_t addr) {
  {
    std::lock_guard<std::mutex> guard(av->mutex);
    auto found = av->nics.find(addr);
    if (found != av->nics.end()) return found->second;
  }
  char name[256];
  size_t len = sizeof(name);
  int nic = -1;
  if (fi_av_lookup(av->base, addr, name, &len) == 0 && len <= sizeof(name))
    nic = publishedNic(canonicalAddress(name, len));
  std::lock_guard<std::mutex> guard(av->mutex);
  av->nics[addr] = nic;
  return nic;
}

bool isOwnAddress(Ep* ep, fi_addr_t addr) {
  if (ep->av == nullptr || ep->ownName.empty()) return false;
  char name[256];
  size_t len = sizeof(name);
  if (fi_av_lookup(ep->av->base, addr, name, &len) != 0 || len > sizeof(name)) return false;
  return canonicalAddress(name, len) == canonicalAddress(ep->ownName.data(), ep->ownName.size());
}

int openAv(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context) {
  auto* ourDomain = reinterpret_cast<Domain*>(domain);
  fid_av* base = nullptr;
  int ret = fi_av_open(ourDomain->base, attr, &base, nullptr);
  if (ret != 0) return ret;
  auto* ours = new (std::nothrow) Av();
  if (ours == nullptr) {
    fi_close(&base->fid);
    return -FI_ENOMEM;
  }
  ours->fid.fid.fclass = FI_CLASS_AV;
  ours->fid.fid.context = context;
  ours->fid.fid.ops = &g_fidOps;
  ours->fid.ops = &g_avOps;
  ours->base = base;
  ours->domain = ourDomain;
  *av = &ours->fid;
  return 0;
}

}  // namespace efa_rules
