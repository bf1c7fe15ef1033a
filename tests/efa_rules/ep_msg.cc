// The endpoint's message operations, untagged and tagged: each call described as a Post,
// admitted by the rules (ep_data.cc) and forwarded to the base.
#include "efa_rules.h"
#include "post.h"

namespace efa_rules {
namespace {

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
  post.withData = (flags & FI_REMOTE_CQ_DATA) != 0;
  post.data = msg->data;
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
  post.withData = true;
  post.data = data;
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_senddata(ep->base, buf, len, bd[0], data, dest, ctx));
}
ssize_t injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  Ep* ep = epOf(f);
  iovec iov{const_cast<void*>(buf), len};
  void* bd[kMaxIov];
  ssize_t ret;
  Post post{Kind::kMsg, false, true, &iov, nullptr, 1, 0, 0, dest, nullptr, "fi_injectdata"};
  post.withData = true;
  post.data = data;
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
    note(Evidence::kRoomyRecvs);
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
  post.withData = (flags & FI_REMOTE_CQ_DATA) != 0;
  post.data = msg->data;
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
  post.withData = true;
  post.data = data;
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
  post.withData = true;
  post.data = data;
  if (!admit(ep, post, bd, &ret)) return ret;
  return tally(ep, post, fi_tinjectdata(ep->base, buf, len, data, dest, tag));
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

fi_ops_msg g_msgOps = makeMsgOps();
fi_ops_tagged g_taggedOps = makeTaggedOps();

}  // namespace

fi_ops_msg* msgOps() {
  return &g_msgOps;
}
fi_ops_tagged* taggedOps() {
  return &g_taggedOps;
}

}  // namespace efa_rules
