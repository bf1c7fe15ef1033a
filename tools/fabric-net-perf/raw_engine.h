// The raw-libfabric baseline: one FI_EP_RDM endpoint per process, the same pattern and window as
// the plugin run. Two protocols (--raw):
//
//  tagged (default): fi_tsend / fi_trecv. Links are told apart by tag bits (sender rank, comm
//    index, sequence number), so no ordering on the wire is assumed.
//
//  rma: receiver-driven writes, the groundwork of the plugin's future rdma protocol. A receive
//    sends the sender a clear-to-send message (fi_tinject, tagged: receiver rank, comm index,
//    sequence number) with the buffer's address, key and size and the id of the receive
//    request; the sender, once it holds the clear-to-send of its next sequence number, writes
//    with fi_writedata and 4 bytes of immediate data: the request id (16 bits) and the size
//    (16 bits: the size when below 65535, 65535 for "the size the receive asked for"). The
//    receiver completes the request named by the data of each remote-CQ-data completion, so
//    nothing relies on order on the wire. Limit: a send of 64 KiB - 1 or more must fill its
//    receive exactly (fabric-net-perf's patterns do: only the 8-byte acknowledgement goes into
//    a larger receive). No allocation per message: requests and clear-to-send receives are
//    pooled.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine.h"
#include "raw_endpoint.h"

namespace nnf::perf {

enum class RawProtocol { kTagged, kRma };

class RawEngine : public Engine {
 public:
  // provider: the name to ask fi_getinfo for (empty: let FI_PROVIDER / libfabric decide).
  explicit RawEngine(std::string provider, RawProtocol protocol = RawProtocol::kTagged)
      : provider_(std::move(provider)), protocol_(protocol) {}
  ~RawEngine() override;
  const char* name() const override { return "raw"; }
  bool connect(Bootstrap& boot, int comms) override;
  bool regMr(Dir dir, int peer, int index, void* data, size_t bytes, void** mh) override;
  bool deregMr(Dir dir, int peer, int index, void* mh) override;
  bool isend(int peer, int index, void* data, size_t bytes, void* mh, void** request) override;
  bool irecv(int peer, int index, void* data, size_t bytes, void* mh, void** request) override;
  bool test(void* request, int* done, size_t* bytes) override;
  bool close() override;

  // Provider, domain and protocol actually opened (for the report header).
  std::string description() const;

 private:
  // Every context handed to libfabric starts with this; the kind tells what completed.
  struct Op {
    fi_context2 ctx;  // first: libfabric hands it back as op_context
    enum class Kind : uint8_t { kRequest, kCtsRecv } kind = Kind::kRequest;
  };
  struct Request : Op {
    Request* next = nullptr;  // the free list, or (rma) the sends of a link waiting for a CTS
    bool done = false;
    bool failed = false;
    size_t bytes = 0;
    std::string failure;
    // rma
    bool awaitingWrite = false;  // a receive whose remote write has not arrived
    size_t posted = 0;           // a receive: its size; a send: the bytes to write
    uint32_t seq = 0;            // a send: its sequence number on the link
    void* data = nullptr;        // a send: source buffer and registration
    void* mh = nullptr;
  };
  // rma: what a receive tells its sender.
  struct Cts {
    uint64_t addr;  // virtual address or offset into the registration (FI_MR_VIRT_ADDR)
    uint64_t key;
    uint64_t bytes;  // the receive's size
    uint32_t reqId;  // the receive request, echoed in the immediate data
    uint32_t seq;
  };
  struct CtsRecv : Op {
    Cts cts;
    int link = 0;
  };
  struct Link {
    Request* head = nullptr;  // sends waiting for their CTS, in sequence order
    Request* tail = nullptr;
    std::vector<Cts> cts;  // arrived and not yet used, by seq % kCtsRing
    std::vector<uint8_t> ctsValid;
  };
  struct Mr {
    fid_mr* mr;
    uintptr_t base;
  };

  bool open();
  bool progress();
  bool fail(const char* what, int rc);
  Request* takeRequest();
  // Takes a request and posts with post(seq, context); on success advances *seq. A full queue
  // (-FI_EAGAIN) or an empty pool is "not now": progress, *request stays nullptr.
  template <typename Post>
  bool start(const char* what, uint32_t* seq, void** request, Post&& post);
  void giveRequest(Request* req);
  void* desc(void* mh) const;

  // rma
  bool setupRma();
  ssize_t postCtsRecv(CtsRecv* c);
  bool ctsArrived(CtsRecv* c, uint64_t tag);
  bool remoteWrite(uint64_t data);
  bool startSends(Link& link);
  bool isendRma(int peer, int index, void* data, size_t bytes, void* mh, void** request);
  bool irecvRma(int peer, int index, void* data, size_t bytes, void* mh, void** request);

  std::string provider_;
  RawProtocol protocol_;
  fi_info* info_ = nullptr;
  tools::RawEndpoint endpoint_;
  int rank_ = 0;
  int comms_ = 0;
  std::vector<fi_addr_t> peers_;
  std::vector<uint32_t> sendSeq_, recvSeq_;  // [peer * comms_ + index]
  std::vector<Request> pool_;
  Request* free_ = nullptr;
  uint64_t nextKey_ = 1;
  // rma
  std::vector<Link> links_;         // [peer * comms_ + index]
  std::vector<CtsRecv> ctsRecvs_;   // posted receives for CTS messages, a few per link
  std::vector<CtsRecv*> toRepost_;  // consumed ones a full queue kept from reposting
  fid_mr* ctsMr_ = nullptr;         // their registration, where FI_MR_LOCAL asks for one
  size_t queuedSends_ = 0;          // sends waiting in the links' queues
};

}  // namespace nnf::perf
