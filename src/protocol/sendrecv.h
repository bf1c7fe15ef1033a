// The sendrecv protocol: each NCCL send is one tagged send, each buffer of a grouped receive
// one tagged receive; the tag (core/tags.h) names the receive comm, the NCCL tag and its sequence
// number. Works on every provider with tagged messages.
#pragma once

#include "core/protocol.h"

namespace nnf::protocol {

class SendRecv final : public Protocol {
 public:
  const char* name() const override { return "sendrecv"; }
  ProtocolId id() const override { return ProtocolId::kSendRecv; }
  abi::Result postSend(core::SendComm& comm, core::Request& request, void* data, size_t size,
                       int tag, core::MemoryHandle* handle) override;
  abi::Result postRecv(core::RecvComm& comm, core::Request& request, int count, void* const* data,
                       const size_t* sizes, const int* tags,
                       core::MemoryHandle* const* handles) override;
};

}  // namespace nnf::protocol
