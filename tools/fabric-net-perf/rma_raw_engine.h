// The raw-libfabric baseline of the rma mode: one FI_EP_RDM endpoint with FI_RMA per process, one
// registration of the window, its address and key exchanged over the bootstrap. put: fi_write;
// put-signal: fi_writedata with the source rank as remote CQ data, the target counting the
// remote-CQ-data completions of its CQ per source; get: fi_read. Requests are pooled.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstdint>
#include <string>
#include <vector>

#include "raw_endpoint.h"
#include "rma_engine.h"

namespace nnf::perf {

class RmaRawEngine : public RmaEngine {
 public:
  // provider: the name to ask fi_getinfo for (empty: let FI_PROVIDER / libfabric decide).
  explicit RmaRawEngine(std::string provider) : provider_(std::move(provider)) {}
  ~RmaRawEngine() override;
  const char* name() const override { return "raw"; }
  std::string description() const override;
  bool connect(Bootstrap& boot) override;
  bool regWindow(Bootstrap& boot, char* base, size_t bytes) override;
  bool deregWindow() override;
  bool put(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) override;
  bool putSignal(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) override;
  bool get(int peer, size_t remoteOff, size_t localOff, size_t bytes, void** request) override;
  bool test(void* request, int* done) override;
  bool signals(int peer, uint64_t* count) override;
  bool close() override;

 private:
  struct Request {
    fi_context2 ctx;  // first: libfabric hands it back as op_context
    Request* next = nullptr;
    bool done = false;
  };
  struct Remote {
    uint64_t addr;  // the window's address (FI_MR_VIRT_ADDR) or 0
    uint64_t key;
  };
  enum class Op { kWrite, kWriteData, kRead };

  bool open();
  bool progress();
  bool fail(const char* what, int rc);
  bool start(Op op, int peer, size_t localOff, size_t remoteOff, size_t bytes, void** request);

  std::string provider_;
  fi_info* info_ = nullptr;
  tools::RawEndpoint endpoint_;
  fid_mr* mr_ = nullptr;
  char* base_ = nullptr;
  int rank_ = 0;
  std::vector<fi_addr_t> peers_;
  std::vector<Remote> remotes_;
  std::vector<uint64_t> signals_;  // remote-CQ-data completions per source rank
  std::vector<Request> pool_;
  Request* free_ = nullptr;
};

}  // namespace nnf::perf
