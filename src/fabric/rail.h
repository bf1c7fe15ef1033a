// One NIC's worth of libfabric objects: fabric, domain, address vector, completion queue and the
// RDM endpoint shared by every comm on it. Opened in the constructor (which throws on failure
// with the libfabric error text), closed in reverse order by the members' destructors.
// Not thread-safe: the owning device serialises access.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <string>
#include <vector>

#include "fabric/fid.h"
#include "fabric/rail_attributes.h"

namespace nnf::fabric {

// A boolean endpoint option set before fi_enable; `result` receives fi_setopt's answer.
struct EndpointSetting {
  int level = 0;
  int name = 0;
  bool value = false;
  int result = 0;
};

class Rail final : public RailAttributes {
 public:
  // `info` is copied; `cqSize` sizes the completion queue (0: provider default). `settings`
  // (may be null) are applied before the endpoint is enabled, where providers read them; each
  // one's result is recorded, a refusal is not an error here. `withEventQueue`: an event queue
  // is bound to the endpoint (efa reports a failed handshake there, and aborts the process when
  // the endpoint has none).
  Rail(const fi_info* info, size_t cqSize, std::vector<EndpointSetting>* settings = nullptr,
       bool withEventQueue = false);
  ~Rail();
  Rail(const Rail&) = delete;
  Rail& operator=(const Rail&) = delete;

  const fi_info* info() const override { return info_.get(); }
  fid_domain* domain() const { return domain_.get(); }
  fid_ep* endpoint() const { return ep_.get(); }

  const std::vector<uint8_t>& address() const override { return address_; }

  // Inserts a peer address; returns 0 and sets *out, or a negative libfabric error.
  int insertAddress(const void* address, size_t length, fi_addr_t* out);
  // Removes a peer address; the provider forgets what it still held for that peer (efa: its
  // queued operations end without a completion). 0, or a negative libfabric error.
  int removeAddress(fi_addr_t address);

  ssize_t tsend(const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
                void* context) {
    return fi_tsend(ep_.get(), buf, len, desc, dest, tag, context);
  }
  // Sends without a completion: the provider copies the buffer before returning.
  ssize_t tinject(const void* buf, size_t len, fi_addr_t dest, uint64_t tag) {
    return fi_tinject(ep_.get(), buf, len, dest, tag);
  }
  ssize_t trecv(void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag, uint64_t ignore,
                void* context) {
    return fi_trecv(ep_.get(), buf, len, desc, src, tag, ignore, context);
  }
  // A tagged receive into `buf`, then into `room` for whatever does not fit: the provider never
  // truncates it (the completion's length tells how much came).
  ssize_t trecvWithRoom(void* buf, size_t len, void* desc, void* room, size_t roomLen,
                        void* roomDesc, uint64_t tag, void* context) {
    iovec iov[2] = {{buf, len}, {room, roomLen}};
    void* descs[2] = {desc, roomDesc};
    return fi_trecvv(ep_.get(), iov, descs, 2, FI_ADDR_UNSPEC, tag, 0, context);
  }
  // Untagged messages: the control channel (one receive queue, matched in arrival order).
  ssize_t send(const void* buf, size_t len, void* desc, fi_addr_t dest, void* context) {
    return fi_send(ep_.get(), buf, len, desc, dest, context);
  }
  ssize_t recv(void* buf, size_t len, void* desc, void* context) {
    return fi_recv(ep_.get(), buf, len, desc, FI_ADDR_UNSPEC, context);
  }
  ssize_t read(void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr, uint64_t key,
               void* context) {
    return fi_read(ep_.get(), buf, len, desc, src, addr, key, context);
  }
  // An RMA write whose immediate `data` raises a completion at the target (FI_REMOTE_CQ_DATA).
  ssize_t writedata(const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                    uint64_t addr, uint64_t key, void* context) {
    return fi_writedata(ep_.get(), buf, len, desc, data, dest, addr, key, context);
  }
  // The same without a completion: the provider copies the buffer before returning.
  ssize_t injectWritedata(const void* buf, size_t len, uint64_t data, fi_addr_t dest, uint64_t addr,
                          uint64_t key) {
    return fi_inject_writedata(ep_.get(), buf, len, data, dest, addr, key);
  }
  // The same from two local buffers, `head` then `body` (the rdma eager path: its header, then
  // the message). No inject variant: fi_writemsg with FI_INJECT still raises a completion.
  ssize_t writedata2(const void* head, size_t headLen, void* headDesc, const void* body,
                     size_t bodyLen, void* bodyDesc, uint64_t data, fi_addr_t dest, uint64_t addr,
                     uint64_t key, void* context) {
    iovec iov[2] = {{const_cast<void*>(head), headLen}, {const_cast<void*>(body), bodyLen}};
    void* desc[2] = {headDesc, bodyDesc};
    fi_rma_iov target{addr, headLen + bodyLen, key};
    fi_msg_rma msg{};
    msg.msg_iov = iov;
    msg.desc = desc;
    msg.iov_count = bodyLen > 0 ? 2 : 1;
    msg.addr = dest;
    msg.rma_iov = &target;
    msg.rma_iov_count = 1;
    msg.context = context;
    msg.data = data;
    return fi_writemsg(ep_.get(), &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION);
  }
  ssize_t readCompletions(fi_cq_tagged_entry* entries, size_t count) {
    return fi_cq_read(cq_.get(), entries, count);
  }
  // Reads one error entry; returns its text in *text (valid until the next call).
  ssize_t readError(fi_cq_err_entry* entry, const char** text);
  // Takes one event-queue error, if any, into `text`: false when there is none (or no queue).
  bool readEventError(int* error, std::string* text);
  int cancel(void* context) { return static_cast<int>(fi_cancel(&ep_->fid, context)); }

  int sizeOption(int level, int name, size_t* out) const override {
    size_t length = sizeof(*out);
    return fi_getopt(&ep_->fid, level, name, out, &length);
  }

 private:
  InfoPtr info_;
  Fid<fid_fabric> fabric_;
  Fid<fid_domain> domain_;
  Fid<fid_av> av_;
  Fid<fid_cq> cq_;
  Fid<fid_eq> eq_;  // null unless withEventQueue
  Fid<fid_ep> ep_;
  std::vector<uint8_t> address_;
  std::vector<char> errorBuffer_;
};

}  // namespace nnf::fabric
