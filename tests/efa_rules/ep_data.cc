// The endpoint's data operations (msg, tagged, RMA): each post is checked against EFA's rules,
// its descriptors translated to the base's, and forwarded. A broken rule turns the post into an
// error completion (or -FI_EINVAL for an inject, which has no completion).
#include <sys/mman.h>
#include <sys/uio.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "efa_rules.h"
#include "platform/nccl_proto.h"

namespace efa_rules {
namespace {

constexpr size_t kMaxIov = 16;

enum class Kind { kMsg, kTagged, kRead, kWrite };

struct Post {
  Kind kind;
  bool recv = false;
  bool inject = false;
  const iovec* iov = nullptr;
  void* const* desc = nullptr;
  size_t count = 0;
  uint64_t tag = 0;
  uint64_t ignore = 0;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  void* context = nullptr;
  const char* op = "";
  const fi_rma_iov* rma = nullptr;  // RMA: the remote side, as the caller gave it
  size_t rmaCount = 0;
};

}  // namespace

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

namespace {

Ep* epOf(fid_ep* ep) {
  return reinterpret_cast<Ep*>(ep);
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

std::string describe(const Post& post, size_t i) {
  char text[160];
  std::snprintf(text, sizeof(text), "%s buffer %p length %zu", post.op,
                post.iov != nullptr && i < post.count ? post.iov[i].iov_base : nullptr,
                post.iov != nullptr && i < post.count ? post.iov[i].iov_len : 0);
  return text;
}

bool isOwnAddress(Ep* ep, fi_addr_t addr) {
  if (ep->av == nullptr || ep->ownName.empty()) return false;
  char name[256];
  size_t len = sizeof(name);
  if (fi_av_lookup(ep->av->base, addr, name, &len) != 0 || len > sizeof(name)) return false;
  return canonicalAddress(name, len) == canonicalAddress(ep->ownName.data(), ep->ownName.size());
}

// The first broken rule of a post, with its detail; 0 when all hold.
Rule firstBrokenRule(Ep* ep, const Post& post, std::string* detail) {
  if (post.kind == Kind::kTagged) {
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
  for (size_t i = 0; post.inject && i < post.count; ++i) {
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
    }
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

// Checks a post and fills the base descriptors; false with *ret set when the post must not be
// forwarded.
bool admit(Ep* ep, const Post& post, void** baseDesc, ssize_t* ret) {
  if (post.count > kMaxIov) {
    *ret = -FI_EINVAL;
    return false;
  }
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
  for (size_t i = 0; i < post.count; ++i) {
    Mr* mr = post.desc != nullptr ? liveMr(post.desc[i]) : nullptr;
    baseDesc[i] = mr != nullptr ? fi_mr_desc(mr->base) : nullptr;
  }
  return true;
}

// Counts what a post the base took carries (sends, RMA writes and reads) for its domain.
ssize_t tally(Ep* ep, const Post& post, ssize_t ret) {
  if (ret != 0 || post.recv) return ret;
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

// --- msg
ssize_t recv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{buf, len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, true, false, &iov, &desc, 1, 0, 0, src, ctx, "fi_recv"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_recv(ep->base, buf, len, bd[0], src, ctx));
}
ssize_t recvv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src, void* ctx) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, true, false, iov, desc, count, 0, 0, src, ctx, "fi_recvv"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_recvv(ep->base, iov, bd, count, src, ctx));
}
ssize_t recvmsg(fid_ep* f, const fi_msg* msg, uint64_t flags) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, true, false,     msg->msg_iov, msg->desc,   msg->iov_count,
            0,          0,    msg->addr, msg->context, "fi_recvmsg"};
  if (!admit(ep, post, bd, &ret)) return ret;
  fi_msg copy = *msg;
  copy.desc = bd;
  return tally(ep, post, fi_recvmsg(ep->base, &copy, flags));
}
ssize_t send(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, false, false, &iov, &desc, 1, 0, 0, dest, ctx, "fi_send"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_send(ep->base, buf, len, bd[0], dest, ctx));
}
ssize_t sendv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest, void* ctx) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, false, false, iov, desc, count, 0, 0, dest, ctx, "fi_sendv"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_sendv(ep->base, iov, bd, count, dest, ctx));
}
ssize_t sendmsg(fid_ep* f, const fi_msg* msg, uint64_t flags) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg,
            false,
            (flags & FI_INJECT) != 0,
            msg->msg_iov,
            msg->desc,
            msg->iov_count,
            0,
            0,
            msg->addr,
            msg->context,
            "fi_sendmsg"};
  if (!admit(ep, post, bd, &ret)) return ret;
  fi_msg copy = *msg;
  copy.desc = bd;
  return tally(ep, post, fi_sendmsg(ep->base, &copy, flags));
}
ssize_t inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, false, true, &iov, nullptr, 1, 0, 0, dest, nullptr, "fi_inject"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_inject(ep->base, buf, len, dest));
}
ssize_t senddata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                 void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, false, false, &iov, &desc, 1, 0, 0, dest, ctx, "fi_senddata"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_senddata(ep->base, buf, len, bd[0], data, dest, ctx));
}
ssize_t injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, false, true, &iov, nullptr, 1, 0, 0, dest, nullptr, "fi_injectdata"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_injectdata(ep->base, buf, len, data, dest));
}

// --- tagged
// Posts a tagged receive to the base with the scratch room after the caller's iovs (see
// roomForReceive), remembering the caller's length for the CQ.
ssize_t postWithRoom(Ep* ep, const Post& post, void** bd, uint64_t flags) {
  size_t roomLength = 0;
  void* room = roomForReceive(&roomLength);
  iovec iov[kMaxIov + 1];
  void* desc[kMaxIov + 1];
  size_t length = 0;
  for (size_t i = 0; i < post.count; ++i) {
    iov[i] = post.iov[i];
    desc[i] = bd[i];
    length += post.iov[i].iov_len;
  }
  size_t count = post.count;
  if (room != nullptr && ep->rxCq != nullptr) {
    iov[count] = {room, roomLength};
    desc[count] = nullptr;
    ++count;
    std::lock_guard<std::mutex> guard(ep->rxCq->mutex);
    ep->rxCq->roomy[post.context] = length;
  }
  fi_msg_tagged msg{iov, desc, count, post.addr, post.tag, post.ignore, post.context, 0};
  ssize_t ret = fi_trecvmsg(ep->base, &msg, flags);
  if (ret != 0 && count > post.count) {
    std::lock_guard<std::mutex> guard(ep->rxCq->mutex);
    ep->rxCq->roomy.erase(post.context);
  }
  return ret;
}

ssize_t trecv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
              uint64_t ignore, void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{buf, len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged, true, false, &iov, &desc, 1, tag, ignore, src, ctx, "fi_trecv"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, postWithRoom(ep, post, bd, 0));
}
ssize_t trecvv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src, uint64_t tag,
               uint64_t ignore, void* ctx) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged, true, false, iov, desc, count, tag, ignore, src, ctx, "fi_trecvv"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, postWithRoom(ep, post, bd, 0));
}
ssize_t trecvmsg(fid_ep* f, const fi_msg_tagged* msg, uint64_t flags) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged, true,        false,     msg->msg_iov, msg->desc,    msg->iov_count,
            msg->tag,      msg->ignore, msg->addr, msg->context, "fi_trecvmsg"};
  if (!admit(ep, post, bd, &ret)) return ret;
  // Peeks and claims name messages the base holds already: no room to add.
  if ((flags & (FI_PEEK | FI_CLAIM)) != 0) {
    fi_msg_tagged copy = *msg;
    copy.desc = bd;
    return tally(ep, post, fi_trecvmsg(ep->base, &copy, flags));
  }
  return tally(ep, post, postWithRoom(ep, post, bd, flags));
}
ssize_t tsend(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
              void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged, false, false, &iov, &desc, 1, tag, 0, dest, ctx, "fi_tsend"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_tsend(ep->base, buf, len, bd[0], dest, tag, ctx));
}
ssize_t tsendv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest, uint64_t tag,
               void* ctx) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged, false, false, iov, desc, count, tag, 0, dest, ctx, "fi_tsendv"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_tsendv(ep->base, iov, bd, count, dest, tag, ctx));
}
ssize_t tsendmsg(fid_ep* f, const fi_msg_tagged* msg, uint64_t flags) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged,
            false,
            (flags & FI_INJECT) != 0,
            msg->msg_iov,
            msg->desc,
            msg->iov_count,
            msg->tag,
            0,
            msg->addr,
            msg->context,
            "fi_tsendmsg"};
  if (!admit(ep, post, bd, &ret)) return ret;
  fi_msg_tagged copy = *msg;
  copy.desc = bd;
  return tally(ep, post, fi_tsendmsg(ep->base, &copy, flags));
}
ssize_t tinject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged, false, true, &iov, nullptr, 1, tag, 0, dest, nullptr, "fi_tinject"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_tinject(ep->base, buf, len, dest, tag));
}
ssize_t tsenddata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                  uint64_t tag, void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged, false, false, &iov, &desc, 1, tag, 0, dest, ctx, "fi_tsenddata"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_tsenddata(ep->base, buf, len, bd[0], data, dest, tag, ctx));
}
ssize_t tinjectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                    uint64_t tag) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kTagged, false, true, &iov, nullptr, 1, tag, 0, dest, nullptr, "fi_tinjectdata"};
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_tinjectdata(ep->base, buf, len, data, dest, tag));
}

// --- RMA
// The message's remote iovs in the base's terms, in `rma` (kMaxIov entries).
bool translateRma(Ep* ep, const fi_msg_rma* msg, fi_rma_iov* rma) {
  if (msg->rma_iov_count > kMaxIov) return false;
  for (size_t i = 0; i < msg->rma_iov_count; ++i) {
    rma[i] = msg->rma_iov[i];
    baseRmaTarget(ep->domain, &rma[i].addr, &rma[i].key);
  }
  return true;
}

ssize_t rread(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr,
              uint64_t key, void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{buf, len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kRead, false, false, &iov, &desc, 1, 0, 0, src, ctx, "fi_read"};
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  return tally(ep, post, fi_read(ep->base, buf, len, bd[0], src, addr, key, ctx));
}
ssize_t rreadv(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src, uint64_t addr,
               uint64_t key, void* ctx) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kRead, false, false, iov, desc, count, 0, 0, src, ctx, "fi_readv"};
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  return tally(ep, post, fi_readv(ep->base, iov, bd, count, src, addr, key, ctx));
}
ssize_t rreadmsg(fid_ep* f, const fi_msg_rma* msg, uint64_t flags) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kRead, false, false,     msg->msg_iov, msg->desc,   msg->iov_count,
            0,           0,     msg->addr, msg->context, "fi_readmsg"};
  post.rma = msg->rma_iov;
  post.rmaCount = msg->rma_iov_count;
  if (!admit(ep, post, bd, &ret)) return ret;
  fi_msg_rma copy = *msg;
  copy.desc = bd;
  fi_rma_iov rma[kMaxIov];
  if (!translateRma(ep, msg, rma)) return -FI_EINVAL;
  copy.rma_iov = rma;
  return tally(ep, post, fi_readmsg(ep->base, &copy, flags));
}
ssize_t rwrite(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
               uint64_t key, void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kWrite, false, false, &iov, &desc, 1, 0, 0, dest, ctx, "fi_write"};
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  return tally(ep, post, fi_write(ep->base, buf, len, bd[0], dest, addr, key, ctx));
}
ssize_t rwritev(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
                uint64_t addr, uint64_t key, void* ctx) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kWrite, false, false, iov, desc, count, 0, 0, dest, ctx, "fi_writev"};
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  return tally(ep, post, fi_writev(ep->base, iov, bd, count, dest, addr, key, ctx));
}
ssize_t rwritemsg(fid_ep* f, const fi_msg_rma* msg, uint64_t flags) {
  Ep* ep = epOf(f);
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kWrite,
            false,
            (flags & FI_INJECT) != 0,
            msg->msg_iov,
            msg->desc,
            msg->iov_count,
            0,
            0,
            msg->addr,
            msg->context,
            "fi_writemsg"};
  post.rma = msg->rma_iov;
  post.rmaCount = msg->rma_iov_count;
  if (!admit(ep, post, bd, &ret)) return ret;
  fi_msg_rma copy = *msg;
  copy.desc = bd;
  fi_rma_iov rma[kMaxIov];
  if (!translateRma(ep, msg, rma)) return -FI_EINVAL;
  copy.rma_iov = rma;
  return tally(ep, post, fi_writemsg(ep->base, &copy, flags));
}
ssize_t rinject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                uint64_t key) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kWrite, false, true, &iov, nullptr, 1, 0, 0, dest, nullptr, "fi_inject_write"};
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  return tally(ep, post, fi_inject_write(ep->base, buf, len, dest, addr, key));
}
ssize_t rwritedata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                   fi_addr_t dest, uint64_t addr, uint64_t key, void* ctx) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kWrite, false, false, &iov, &desc, 1, 0, 0, dest, ctx, "fi_writedata"};
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  if (ep->domain->holdMs > 0 && ep->txCq != nullptr &&
      holdWrite(ep, buf, len, data, dest, addr, key)) {
    ep->txCq->pushSuccess(ctx, completionFlags(post));
    return tally(ep, post, 0);
  }
  return tally(ep, post, fi_writedata(ep->base, buf, len, bd[0], data, dest, addr, key, ctx));
}
ssize_t rinjectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                    uint64_t addr, uint64_t key) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kWrite,         false, true, &iov, nullptr, 1, 0, 0, dest, nullptr,
            "fi_inject_writedata"};
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  if (ep->domain->holdMs > 0 && holdWrite(ep, buf, len, data, dest, addr, key)) {
    return tally(ep, post, 0);
  }
  return tally(ep, post, fi_inject_writedata(ep->base, buf, len, data, dest, addr, key));
}

fi_ops_rma makeRmaOps() {
  fi_ops_rma ops{};
  ops.size = sizeof(ops);
  ops.read = rread;
  ops.readv = rreadv;
  ops.readmsg = rreadmsg;
  ops.write = rwrite;
  ops.writev = rwritev;
  ops.writemsg = rwritemsg;
  ops.inject = rinject;
  ops.writedata = rwritedata;
  ops.injectdata = rinjectdata;
  return ops;
}

fi_ops_msg makeMsgOps() {
  fi_ops_msg ops{};
  ops.size = sizeof(ops);
  ops.recv = recv;
  ops.recvv = recvv;
  ops.recvmsg = recvmsg;
  ops.send = send;
  ops.sendv = sendv;
  ops.sendmsg = sendmsg;
  ops.inject = inject;
  ops.senddata = senddata;
  ops.injectdata = injectdata;
  return ops;
}

fi_ops_tagged makeTaggedOps() {
  fi_ops_tagged ops{};
  ops.size = sizeof(ops);
  ops.recv = trecv;
  ops.recvv = trecvv;
  ops.recvmsg = trecvmsg;
  ops.send = tsend;
  ops.sendv = tsendv;
  ops.sendmsg = tsendmsg;
  ops.inject = tinject;
  ops.senddata = tsenddata;
  ops.injectdata = tinjectdata;
  return ops;
}

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

fi_ops_msg g_msgOps = makeMsgOps();
fi_ops_tagged g_taggedOps = makeTaggedOps();
fi_ops_atomic g_atomicOps = makeAtomicOps();
fi_ops_rma g_rmaOps = makeRmaOps();

}  // namespace

void installDataOps(Ep* ep) {
  ep->fid.msg = &g_msgOps;
  ep->fid.tagged = &g_taggedOps;
  ep->fid.rma = &g_rmaOps;
  ep->fid.atomic = &g_atomicOps;
}

}  // namespace efa_rules
