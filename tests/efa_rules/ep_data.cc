// The checks of the endpoint's data operations (ep_msg.cc: msg and tagged; ep_rma.cc: RMA):
// each post is checked against EFA's rules, its descriptors translated to the base's, and
// forwarded. A broken rule turns the post into an error completion (or -FI_EINVAL for an
// inject, which has no completion).
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "efa_rules.h"
#include "link.h"
#include "platform/nccl_proto.h"
#include "post.h"

namespace efa_rules {

void* roomForReceive(size_t* length) {
  // 1 GiB of address space, reserved once for the process and never backed for long.
  static constexpr size_t kRoom = size_t{1} << 30;
  static void* room = [] {
    void* area = mmap(nullptr, kRoom, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return area == MAP_FAILED ? nullptr : area;
  }();
  *length = kRoom;
  return room;
}

uint64_t completionFlags(const Post& post) {
  switch (post.kind) {
    case Kind::kMsg:
      return FI_MSG | (post.recv ? FI_RECV : FI_SEND);
    case Kind::kTagged:
      return FI_TAGGED | (post.recv ? FI_RECV : FI_SEND);
    case Kind::kRead:
      return FI_RMA | FI_READ;
    case Kind::kWrite:
      return FI_RMA | FI_WRITE;
  }
  return 0;
}

namespace {

std::string describe(const Post& post, size_t i) {
  char text[160];
  std::snprintf(text, sizeof(text), "%s buffer %p length %zu", post.op,
                post.iov != nullptr && i < post.count ? post.iov[i].iov_base : nullptr,
                post.iov != nullptr && i < post.count ? post.iov[i].iov_len : 0);
  return text;
}

// The first broken rule of a post, with its detail; 0 when all hold.
Rule firstBrokenRule(Ep* ep, const Post& post, std::string* detail) {
  if (post.kind == Kind::kTagged) {
    note(Evidence::kTagChecks);
    uint64_t bits = post.tag | (post.recv ? post.ignore : 0);
    if (bits & ~ep->domain->tagMask) {
      char text[160];
      std::snprintf(text, sizeof(text), "%s tag 0x%llx ignore 0x%llx outside mem_tag_format 0x%llx",
                    post.op, static_cast<unsigned long long>(post.tag),
                    static_cast<unsigned long long>(post.ignore),
                    static_cast<unsigned long long>(ep->domain->tagMask));
      *detail = text;
      return Rule::kTagFormat;
    }
  }
  if (post.withData) {
    note(Evidence::kImmediateChecks);
    *detail = immediateTooWide(post.op, post.data);
    if (!detail->empty()) return Rule::kCqDataSize;
  }
  if (post.kind == Kind::kWrite && post.withData) {
    note(Evidence::kWriteSizeChecks);
    size_t len = 0;
    for (size_t i = 0; post.iov != nullptr && i < post.count; ++i) len += post.iov[i].iov_len;
    if (len > kEfaMaxWriteBytes) {
      char text[200];
      std::snprintf(text, sizeof(text),
                    "%s of %zu bytes with immediate data: EFA cuts it at %zu bytes and each piece "
                    "completes at the target with the same immediate",
                    post.op, len, kEfaMaxWriteBytes);
      *detail = text;
      return Rule::kRmaSize;
    }
  }
  for (size_t i = 0; post.inject && i < post.count; ++i) {
    if (post.iov[i].iov_len > 0) note(Evidence::kInjectChecks);
    const void* buf = post.iov[i].iov_base;
    if (registeredAsDevice(buf, post.iov[i].iov_len) || driverSaysDevice(buf)) {
      *detail = describe(post, i) + " is device memory (inject copies with the CPU)";
      return Rule::kInjectDeviceMemory;
    }
  }
  // Each NIC's memory keys are its own: a descriptor from another domain's MR means nothing to
  // this endpoint's NIC, FI_MR_LOCAL or not.
  for (size_t i = 0; post.desc != nullptr && i < post.count; ++i) {
    Mr* mr = post.desc[i] != nullptr ? liveMr(post.desc[i]) : nullptr;
    if (mr != nullptr) note(Evidence::kDomainChecks);
    if (mr != nullptr && mr->domain != ep->domain) {
      *detail = describe(post, i) + " has a descriptor of an MR of domain " + mr->domain->name +
                ", not of the endpoint's domain " + ep->domain->name;
      return Rule::kWrongDomain;
    }
  }
  // An RMA must name the target's memory with a key of the target endpoint's NIC.
  if (post.rmaCount > 0 && ep->av != nullptr) {
    int targetNic = -1;
    for (size_t i = 0; i < post.rmaCount; ++i) {
      int keyNic = nicOfKey(ep->domain, post.rma[i].key);
      if (keyNic < 0) continue;
      if (targetNic < 0) targetNic = nicOfPeer(ep->av, post.addr);
      if (targetNic >= 0) note(Evidence::kRemoteKeyChecks);
      if (targetNic < 0 || keyNic == targetNic) continue;
      char text[200];
      std::snprintf(text, sizeof(text),
                    "%s remote key 0x%llx (address 0x%llx) is a key of NIC %d, but the target "
                    "endpoint is on NIC %d",
                    post.op, static_cast<unsigned long long>(post.rma[i].key),
                    static_cast<unsigned long long>(post.rma[i].addr), keyNic, targetNic);
      *detail = text;
      return Rule::kRemoteKeyDomain;
    }
  }
  if (ep->domain->mrLocal && !post.inject) {
    for (size_t i = 0; i < post.count; ++i) {
      if (post.iov[i].iov_len == 0) continue;
      Mr* mr = post.desc != nullptr ? liveMr(post.desc[i]) : nullptr;
      auto start = reinterpret_cast<uintptr_t>(post.iov[i].iov_base);
      if (mr == nullptr) {
        *detail = describe(post, i) + (post.desc == nullptr || post.desc[i] == nullptr
                                           ? " has no descriptor"
                                           : " has a descriptor that is no live MR");
        return Rule::kMissingDescriptor;
      }
      if (start < mr->start || start + post.iov[i].iov_len > mr->end) {
        *detail = describe(post, i) + " is not covered by its descriptor's MR";
        return Rule::kMissingDescriptor;
      }
      note(Evidence::kDescriptorChecks);
    }
  }
  if (post.kind == Kind::kWrite && !post.inject) {
    *detail = emulatedWriteMixesMemory(ep, post.op, post.iov, post.desc, post.count, post.rmaCount,
                                       post.withData, post.addr);
    if (!detail->empty()) return Rule::kMixedHmemIov;
  }
  if (post.kind == Kind::kRead && ep->options.sharedMemoryPermitted != 0 &&
      isOwnAddress(ep, post.addr)) {
    *detail = describe(post, 0) +
              " reads from our own address while FI_OPT_SHARED_MEMORY_PERMITTED is not false";
    return Rule::kSharedMemoryRead;
  }
  // NCCL's LL128 lines travel as tagged sends (sendrecv) or RMA writes (rdma), checked where they
  // are posted; untagged messages carry connection set-up and control only, and a tagged
  // receive under rdma is a drain for a closed comm.
  if (ep->hmem && !ep->ll128Reported && !post.recv &&
      (post.kind == Kind::kWrite || post.kind == Kind::kTagged)) {
    int which = post.kind == Kind::kWrite ? 1 : 0;
    if (!ep->ll128Checked[which]) {
      ep->ll128Checked[which] = true;
      int option = which == 1 ? ep->options.write128 : ep->options.sendrecv128;
      const char* proto = std::getenv("NCCL_PROTO");
      if (option != 1 && (proto == nullptr || nnf::platform::protoMayEnableLL128(proto))) {
        ep->ll128Reported = true;
        *detail = std::string(post.op) + ": FI_OPT_EFA_" + (which == 1 ? "WRITE" : "SENDRECV") +
                  "_IN_ORDER_ALIGNED_128_BYTES not set while NCCL_PROTO is " +
                  (proto != nullptr ? proto : "unset");
        return Rule::kLl128Order;
      }
    }
  }
  return static_cast<Rule>(0);
}

// What the rules apply to in `post`, counted before any of them looks (efa_rules.h, Evidence).
void noteApplicable(Ep* ep, const Post& post) {
  size_t bytes = 0;
  bool described = false;
  for (size_t i = 0; i < post.count; ++i) {
    bytes += post.iov[i].iov_len;
    described = described || (post.desc != nullptr && post.desc[i] != nullptr &&
                              liveMr(post.desc[i]) != nullptr);
  }
  if (bytes > 0) note(post.inject ? Evidence::kInjects : Evidence::kBufferPosts);
  if (post.kind == Kind::kTagged) note(Evidence::kTaggedPosts);
  if (post.kind == Kind::kTagged && post.recv) note(Evidence::kTaggedRecvs);
  if (described) note(Evidence::kDescribedPosts);
  if (post.withData) note(Evidence::kDataPosts);
  if (post.kind == Kind::kWrite && post.withData) {
    note(Evidence::kDataWrites);
    if (post.count > 1 || post.rmaCount > 1) note(Evidence::kMultiIovDataWrites);
  }
  if (post.rmaCount > 0 && ep->av != nullptr && nicOfKey(ep->domain, post.rma[0].key) >= 0) {
    note(Evidence::kNicKeyedRma);
  }
}

}  // namespace

bool admit(Ep* ep, const Post& post, void** baseDesc, ssize_t* ret) {
  if (post.count > kMaxIov) {
    *ret = -FI_EINVAL;
    return false;
  }
  // Before the rules: a post retried after -FI_EAGAIN is checked (and reported) once.
  if (!post.recv && awaitingHandshake(ep, post.addr)) {
    *ret = -FI_EAGAIN;
    return false;
  }
  noteApplicable(ep, post);
  std::string detail;
  Rule rule = firstBrokenRule(ep, post, &detail);
  if (rule != static_cast<Rule>(0)) {
    int provErrno = violation(rule, detail);
    Cq* cq = post.recv ? ep->rxCq : ep->txCq;
    if (post.inject || cq == nullptr) {
      *ret = -FI_EINVAL;
    } else {
      cq->pushError(post.context, completionFlags(post), provErrno);
      *ret = 0;
    }
    return false;
  }
  if (post.kind == Kind::kWrite && ep->domain->failsWrites) {
    // A NIC whose link broke: its writes fail, the other NICs' carry on.
    Cq* cq = ep->txCq;
    if (post.inject || cq == nullptr) {
      *ret = -FI_EIO;
    } else {
      cq->pushError(post.context, completionFlags(post), kFailedNicErrno, FI_EIO);
      *ret = 0;
    }
    return false;
  }
  // The endpoint's NIC or the target's has its link down (link.cc): the error is queued.
  if (failedByLink(ep, post)) {
    *ret = 0;
    return false;
  }
  for (size_t i = 0; i < post.count; ++i) {
    Mr* mr = post.desc != nullptr ? liveMr(post.desc[i]) : nullptr;
    baseDesc[i] = mr != nullptr ? fi_mr_desc(mr->base) : nullptr;
  }
  return true;
}

ssize_t tally(Ep* ep, const Post& post, ssize_t ret) {
  if (ret != 0 || post.recv) return ret;
  noteTransmit(ep, post);  // link.cc: a link that goes down before it completes fails it
  uint64_t bytes = 0;
  for (size_t i = 0; i < post.count; ++i) bytes += post.iov[i].iov_len;
  Traffic* traffic = ep->domain->traffic;
  if (post.kind == Kind::kWrite)
    traffic->written += bytes;
  else if (post.kind == Kind::kRead)
    traffic->read += bytes;
  else
    traffic->sent += bytes;
  return ret;
}

namespace {

fi_ops_atomic makeAtomicOps() {
  fi_ops_atomic ops{};
  ops.size = sizeof(ops);
  nosys(ops.write);
  nosys(ops.writev);
  nosys(ops.writemsg);
  nosys(ops.inject);
  nosys(ops.readwrite);
  nosys(ops.readwritev);
  nosys(ops.readwritemsg);
  nosys(ops.compwrite);
  nosys(ops.compwritev);
  nosys(ops.compwritemsg);
  nosys(ops.writevalid);
  nosys(ops.readwritevalid);
  nosys(ops.compwritevalid);
  return ops;
}

fi_ops_atomic g_atomicOps = makeAtomicOps();

}  // namespace

void installDataOps(Ep* ep) {
  ep->fid.msg = msgOps();
  ep->fid.tagged = taggedOps();
  ep->fid.rma = rmaOps();
  ep->fid.atomic = &g_atomicOps;
}

}  // namespace efa_rules
