// The raw-libfabric baseline: one FI_EP_RDM endpoint per process with tagged messages, the same
// pattern and window as the plugin run. Links are told apart by tag bits (sender rank, comm
// index, sequence number), so no ordering on the wire is assumed.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine.h"

namespace nnf::perf {

class RawEngine : public Engine {
 public:
  // provider: the name to ask fi_getinfo for (empty: let FI_PROVIDER / libfabric decide).
  explicit RawEngine(std::string provider) : provider_(std::move(provider)) {}
  ~RawEngine() override;
  const char* name() const override { return "raw"; }
  bool connect(Bootstrap& boot, int comms) override;
  bool regMr(Dir dir, int peer, int index, void* data, size_t bytes, void** mh) override;
  bool deregMr(Dir dir, int peer, int index, void* mh) override;
  bool isend(int peer, int index, void* data, size_t bytes, void* mh, void** request) override;
  bool irecv(int peer, int index, void* data, size_t bytes, void* mh, void** request) override;
  bool test(void* request, int* done, size_t* bytes) override;
  bool close() override;

  // Provider and domain actually opened (for the report header).
  std::string description() const;

 private:
  struct Request {
    fi_context2 ctx;  // first: libfabric hands it back as op_context
    Request* nextFree = nullptr;
    bool done = false;
    bool failed = false;
    size_t bytes = 0;
    std::string failure;
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

  std::string provider_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  int rank_ = 0;
  int comms_ = 0;
  std::vector<fi_addr_t> peers_;
  std::vector<uint32_t> sendSeq_, recvSeq_;  // [peer * comms_ + index]
  std::vector<Request> pool_;
  Request* free_ = nullptr;
  uint64_t nextKey_ = 1;
};

}  // namespace nnf::perf
