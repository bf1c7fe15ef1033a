// The sender's data writes (docs/architecture.md, "Multi-rail"): a send's message written into
// the buffer its descriptor names, whole on one rail or striped in page-aligned shares over all
// of them, each share cut into segments the provider writes as one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/memory_handle.h"
#include "core/operation.h"
#include "core/request.h"
#include "core/send_comm.h"
#include "protocol/rdma_device.h"
#include "protocol/rdma_matching.h"
#include "protocol/rdma_send_close.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

// The part of a message one rail carries: `length` bytes from `offset`, in `segments` writes.
struct Share {  // no initialisers: planShares fills those it uses (every send pays for them)
  uint64_t offset;
  uint64_t length;
  uint32_t segments;
};

// How a message of `total` bytes goes: whole on one rail below `stripeMin` (or with one rail),
// else in page-aligned shares over every rail, each cut into writes of at most `segmentBytes`.
// Returns the number of shares.
uint32_t planShares(uint64_t total, size_t rails, size_t stripeMin, uint64_t segmentBytes,
                    Share* shares);

class Striper {
 public:
  Striper(core::SendComm& comm, const RdmaDevice& rdma, SenderClose& close)
      : comm_(comm), rdma_(rdma), close_(close) {}
  Striper(const Striper&) = delete;
  Striper& operator=(const Striper&) = delete;

  // Posts the writes of the send in `request` (its pendingSend set) into the buffer `arrived`
  // describes, one share per rail, or tells the receiver that the message does not fit.
  // `handle`: the send's registration (null for buffers without one). Failures land in the
  // request.
  void startWrite(core::Request& request, const Arrived& arrived, const BufferDescriptor& buffer,
                  core::MemoryHandle* handle);
  // A segment of a request's write completed: true when the next one of its share is posted.
  bool continueWrite(core::Operation& op);

 private:
  bool postShare(core::Request& request, core::Operation& op, size_t rail, bool inject,
                 uint64_t total);
  void refuse(core::Request& request, const Arrived& arrived, const BufferDescriptor& buffer,
              uint64_t total);

  core::SendComm& comm_;
  const RdmaDevice& rdma_;
  SenderClose& close_;
  size_t nextRail_ = 0;  // the rail of the next message that goes whole on one
};

}  // namespace nnf::protocol::rdma
