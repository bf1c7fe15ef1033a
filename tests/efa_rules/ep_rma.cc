// The endpoint's RMA operations: each call described as a Post, admitted by the rules
// (ep_data.cc), its remote address and key put in the base's terms, and forwarded. Writes with
// immediate data carry their length to the target in the bits EFA's callers cannot use
// (immediate.cc); NNF_EFA_RULES_HOLD_NIC holds some back, NNF_EFA_RULES_HOLD_READS every read
// (held.cc).
#include "efa_rules.h"
#include "post.h"

namespace efa_rules {
namespace {

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
  if (ep->domain->holdReadsMs > 0) {
    fi_rma_iov based{addr, len, key};
    holdRead(ep, &iov, bd, 1, src, &based, 1, ctx, FI_COMPLETION);
    return tally(ep, post, 0);
  }
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
  if (ep->domain->holdReadsMs > 0) {
    size_t len = 0;
    for (size_t i = 0; i < count; ++i) len += iov[i].iov_len;
    fi_rma_iov based{addr, len, key};
    holdRead(ep, iov, bd, count, src, &based, 1, ctx, FI_COMPLETION);
    return tally(ep, post, 0);
  }
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
  if (ep->domain->holdReadsMs > 0) {
    holdRead(ep, msg->msg_iov, bd, msg->iov_count, msg->addr, rma, msg->rma_iov_count, msg->context,
             flags);
    return tally(ep, post, 0);
  }
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
  post.withData = (flags & FI_REMOTE_CQ_DATA) != 0;
  post.data = msg->data;
  post.rma = msg->rma_iov;
  post.rmaCount = msg->rma_iov_count;
  if (!admit(ep, post, bd, &ret)) return ret;
  fi_msg_rma copy = *msg;
  copy.desc = bd;
  fi_rma_iov rma[kMaxIov];
  if (!translateRma(ep, msg, rma)) return -FI_EINVAL;
  copy.rma_iov = rma;
  if (post.withData) {
    size_t len = 0;
    for (size_t i = 0; i < msg->iov_count; ++i) len += msg->msg_iov[i].iov_len;
    copy.data = wireData(ep->domain, msg->data, len);
  }
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
  post.withData = true;
  post.data = data;
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  uint64_t wire = wireData(ep->domain, data, len);
  if (ep->domain->holdMs > 0 && ep->txCq != nullptr &&
      holdWrite(ep, buf, len, wire, dest, addr, key)) {
    ep->txCq->pushSuccess(ctx, completionFlags(post));
    return tally(ep, post, 0);
  }
  return tally(ep, post, fi_writedata(ep->base, buf, len, bd[0], wire, dest, addr, key, ctx));
}
ssize_t rinjectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                    uint64_t addr, uint64_t key) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kWrite,         false, true, &iov, nullptr, 1, 0, 0, dest, nullptr,
            "fi_inject_writedata"};
  post.withData = true;
  post.data = data;
  fi_rma_iov target{addr, 0, key};
  post.rma = &target;
  post.rmaCount = 1;
  if (!admit(ep, post, bd, &ret)) return ret;
  baseRmaTarget(ep->domain, &addr, &key);
  uint64_t wire = wireData(ep->domain, data, len);
  if (ep->domain->holdMs > 0 && holdWrite(ep, buf, len, wire, dest, addr, key)) {
    return tally(ep, post, 0);
  }
  return tally(ep, post, fi_inject_writedata(ep->base, buf, len, wire, dest, addr, key));
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

fi_ops_rma g_rmaOps = makeRmaOps();

}  // namespace

fi_ops_rma* rmaOps() {
  return &g_rmaOps;
}

}  // namespace efa_rules
