// The endpoint's control side: open, bind, enable, options (EFA's, with their real numbers,
// each refusable on demand) and the CM names. Data operations are in ep_data.cc.
#include <cstring>

#include "efa_rules.h"
#include "link.h"

namespace efa_rules {
namespace {

Ep* epOf(fid* f) {
  return reinterpret_cast<Ep*>(f);
}
Ep* epOf(fid_ep* ep) {
  return reinterpret_cast<Ep*>(ep);
}

int closeEp(fid* f) {
  Ep* ep = epOf(f);
  // rxm on libfabric 1.17 dereferences the endpoint's AV when it closes one that never had an
  // AV bound (a probe that only opens it); a throwaway AV, bound first, keeps it from crashing.
  fid_av* spare = nullptr;
  if (ep->av == nullptr) {
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    if (fi_av_open(ep->domain->base, &attr, &spare, nullptr) == 0 &&
        fi_ep_bind(ep->base, &spare->fid, 0) != 0) {
      fi_close(&spare->fid);
      spare = nullptr;
    }
  }
  if (ep->enabled && loadConfig().nics > 1) withdrawAddress(ep->ownName, ep->domain->nic);
  int ret = fi_close(&ep->base->fid);
  if (spare != nullptr) fi_close(&spare->fid);
  delete ep;
  return ret;
}

// An AV or CQ opened on another of our domains (another NIC) than the endpoint's.
bool otherDomain(Ep* ep, const Domain* domain, const char* what) {
  if (domain == ep->domain) return false;
  violation(Rule::kWrongDomain, std::string("fi_ep_bind of ") + what + " opened on domain " +
                                    (domain != nullptr ? domain->name : "?") +
                                    " to an endpoint of domain " + ep->domain->name);
  return true;
}

int bindEp(fid* f, fid* bfid, uint64_t flags) {
  Ep* ep = epOf(f);
  if (bfid == nullptr) return -FI_EINVAL;
  switch (bfid->fclass) {
    case FI_CLASS_AV: {
      auto* av = reinterpret_cast<Av*>(bfid);
      if (otherDomain(ep, av->domain, "an AV")) return -FI_EINVAL;
      int ret = fi_ep_bind(ep->base, &av->base->fid, flags);
      if (ret == 0) ep->av = av;
      return ret;
    }
    case FI_CLASS_CQ: {
      auto* cq = reinterpret_cast<Cq*>(bfid);
      if (otherDomain(ep, cq->domain, "a CQ")) return -FI_EINVAL;
      int ret = fi_ep_bind(ep->base, &cq->base->fid, flags);
      if (ret != 0) return ret;
      if (flags & FI_TRANSMIT) ep->txCq = cq;
      if (flags & FI_RECV) ep->rxCq = cq;
      return 0;
    }
    default:
      return -FI_ENOSYS;
  }
}

int controlEp(fid* f, int command, void* arg) {
  Ep* ep = epOf(f);
  if (command != FI_ENABLE) return fi_control(&ep->base->fid, command, arg);
  if (ep->hmem && ep->options.cudaApiPermitted != 0) {
    // EFA would copy device memory with CUDA calls from the caller's thread (NCCL's proxy).
    violation(Rule::kCudaApiPermitted,
              "fi_enable with FI_HMEM while FI_OPT_CUDA_API_PERMITTED is not set to false");
  }
  int ret = fi_enable(ep->base);
  if (ret != 0) return ret;
  ep->enabled = true;
  char name[256];
  size_t len = sizeof(name);
  if (fi_getname(&ep->base->fid, name, &len) == 0) ep->ownName.assign(name, len);
  if (loadConfig().nics > 1 && !ep->ownName.empty()) publishAddress(ep->ownName, ep->domain->nic);
  return 0;
}

const char* optionName(int optname) {
  switch (optname) {
    case kOptCudaApiPermitted:
      return "cuda_api_permitted";
    case kOptSharedMemoryPermitted:
      return "shared_memory_permitted";
    case kOptEfaRnrRetry:
      return "rnr_retry";
    case kOptEfaUseDeviceRdma:
      return "use_device_rdma";
    case kOptEfaSendrecvInOrder128:
      return "sendrecv_in_order_aligned_128_bytes";
    case kOptEfaWriteInOrder128:
      return "write_in_order_aligned_128_bytes";
    case kOptEfaEmulatedRead:
      return "emulated_read";
    case kOptEfaEmulatedWrite:
      return "emulated_write";
    case kOptEfaEmulatedAtomics:
      return "emulated_atomics";
    default:
      return nullptr;
  }
}

int setBool(int* slot, const void* optval, size_t optlen) {
  if (optval == nullptr || optlen != sizeof(bool)) return -FI_EINVAL;
  *slot = *static_cast<const bool*>(optval) ? 1 : 0;
  return 0;
}

int setopt(fid* f, int level, int optname, const void* optval, size_t optlen) {
  Ep* ep = epOf(f);
  if (level != FI_OPT_ENDPOINT) return fi_setopt(&ep->base->fid, level, optname, optval, optlen);
  const char* name = optionName(optname);
  if (ep->enabled) {
    violation(Rule::kOptionAfterEnable, std::string("fi_setopt(") +
                                            (name != nullptr ? name : std::to_string(optname)) +
                                            ") after fi_enable");
    return -FI_EOPBADSTATE;
  }
  if (name == nullptr) return fi_setopt(&ep->base->fid, level, optname, optval, optlen);
  if (refused(name)) return -FI_EOPNOTSUPP;
  EpOptions& options = ep->options;
  switch (optname) {
    case kOptCudaApiPermitted:
      return setBool(&options.cudaApiPermitted, optval, optlen);
    case kOptSharedMemoryPermitted:
      return setBool(&options.sharedMemoryPermitted, optval, optlen);
    case kOptEfaUseDeviceRdma:
      return setBool(&options.useDeviceRdma, optval, optlen);
    case kOptEfaSendrecvInOrder128:
      return setBool(&options.sendrecv128, optval, optlen);
    case kOptEfaWriteInOrder128:
      return setBool(&options.write128, optval, optlen);
    case kOptEfaRnrRetry:
      if (optval == nullptr || optlen != sizeof(size_t)) return -FI_EINVAL;
      options.rnrRetry = *static_cast<const size_t*>(optval);
      return 0;
    default:
      return -FI_ENOPROTOOPT;  // the emulated_* options can only be read, as on EFA
  }
}

template <typename T>
int put(const T& value, void* optval, size_t* optlen) {
  if (optlen == nullptr) return -FI_EINVAL;
  if (optval == nullptr || *optlen < sizeof(T)) {
    *optlen = sizeof(T);
    return -FI_ETOOSMALL;
  }
  std::memcpy(optval, &value, sizeof(T));
  *optlen = sizeof(T);
  return 0;
}

int getopt(fid* f, int level, int optname, void* optval, size_t* optlen) {
  Ep* ep = epOf(f);
  if (level != FI_OPT_ENDPOINT) return fi_getopt(&ep->base->fid, level, optname, optval, optlen);
  const EpOptions& options = ep->options;
  switch (optname) {
    case kOptEfaRulesViolations:
      return put<uint64_t>(violationCount(), optval, optlen);
    case kOptEfaRulesHandshakeEagains: {
      std::lock_guard<std::mutex> guard(ep->peersMutex);
      return put<uint64_t>(ep->handshakeEagains, optval, optlen);
    }
    case kOptEfaRulesLinkDown:
      return put<uint32_t>(linkDownMask(), optval, optlen);
    case kOptEfaRulesLinkFailed:
      return put<uint64_t>(linkFailedOperations(), optval, optlen);
    case kOptEfaRulesLinkWithheld:
      return put<uint64_t>(linkWithheldOperations(), optval, optlen);
    case kOptEfaRulesLinkForgotten:
      return put<uint64_t>(linkForgottenOperations(), optval, optlen);
    case kOptCudaApiPermitted:
      return put<bool>(options.cudaApiPermitted != 0, optval, optlen);
    case kOptSharedMemoryPermitted:
      return put<bool>(options.sharedMemoryPermitted != 0, optval, optlen);
    case kOptEfaUseDeviceRdma:
      return put<bool>(options.useDeviceRdma == 1, optval, optlen);
    case kOptEfaSendrecvInOrder128:
      return put<bool>(options.sendrecv128 == 1, optval, optlen);
    case kOptEfaWriteInOrder128:
      return put<bool>(options.write128 == 1, optval, optlen);
    case kOptEfaRnrRetry:
      return put<size_t>(options.rnrRetry, optval, optlen);
    case kOptEfaEmulatedWrite:
      // What a p5's NIC says (device RDMA write), or a p4d's (NNF_EFA_RULES_EMULATED_WRITE=1).
      return put<bool>(loadConfig().emulatedWrite, optval, optlen);
    case kOptEfaEmulatedRead:
    case kOptEfaEmulatedAtomics:
      return put<bool>(true, optval, optlen);  // no device RDMA under us
    default:
      return fi_getopt(&ep->base->fid, level, optname, optval, optlen);
  }
}

ssize_t cancel(fid* f, void* context) {
  return fi_cancel(&epOf(f)->base->fid, context);
}

int setname(fid* f, void* addr, size_t addrlen) {
  return fi_setname(&epOf(f)->base->fid, addr, addrlen);
}
int getname(fid* f, void* addr, size_t* addrlen) {
  return fi_getname(&epOf(f)->base->fid, addr, addrlen);
}
int getpeer(fid_ep* ep, void* addr, size_t* addrlen) {
  return fi_getpeer(epOf(ep)->base, addr, addrlen);
}

fi_ops makeFidOps() {
  fi_ops ops{};
  ops.size = sizeof(ops);
  ops.close = closeEp;
  ops.bind = bindEp;
  ops.control = controlEp;
  nosys(ops.ops_open);
  nosys(ops.tostr);
  nosys(ops.ops_set);
  return ops;
}

fi_ops_ep makeEpOps() {
  fi_ops_ep ops{};
  ops.size = sizeof(ops);
  ops.cancel = cancel;
  ops.getopt = getopt;
  ops.setopt = setopt;
  nosys(ops.tx_ctx);
  nosys(ops.rx_ctx);
  nosys(ops.rx_size_left);
  nosys(ops.tx_size_left);
  return ops;
}

fi_ops_cm makeCmOps() {
  fi_ops_cm ops{};
  ops.size = sizeof(ops);
  ops.setname = setname;
  ops.getname = getname;
  ops.getpeer = getpeer;
  nosys(ops.connect);
  nosys(ops.listen);
  nosys(ops.accept);
  nosys(ops.reject);
  nosys(ops.shutdown);
  nosys(ops.join);
  return ops;
}

fi_ops g_fidOps = makeFidOps();
fi_ops_ep g_epOps = makeEpOps();
fi_ops_cm g_cmOps = makeCmOps();

}  // namespace

int openEp(fid_domain* domain, fi_info* info, fid_ep** ep, void* context) {
  if (domain == nullptr || info == nullptr || ep == nullptr) return -FI_EINVAL;
  auto* ourDomain = reinterpret_cast<Domain*>(domain);
  fi_info* baseInfo = baseInfoFor(info, loadConfig());
  if (baseInfo == nullptr) return -FI_ENODATA;
  fid_ep* base = nullptr;
  int ret = fi_endpoint(ourDomain->base, baseInfo, &base, nullptr);
  fi_freeinfo(baseInfo);
  if (ret != 0) return ret;
  auto* ours = new (std::nothrow) Ep();
  if (ours == nullptr) {
    fi_close(&base->fid);
    return -FI_ENOMEM;
  }
  ours->fid.fid.fclass = FI_CLASS_EP;
  ours->fid.fid.context = context;
  ours->fid.fid.ops = &g_fidOps;
  ours->fid.ops = &g_epOps;
  ours->fid.cm = &g_cmOps;
  ours->base = base;
  ours->domain = ourDomain;
  ours->caps = info->caps;
  ours->hmem = (info->caps & FI_HMEM) != 0;
  installDataOps(ours);
  *ep = &ours->fid;
  return 0;
}

}  // namespace efa_rules
