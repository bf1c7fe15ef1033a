// How a comm's data moves. The core handles connections, requests and completions; a protocol
// decides which libfabric operations carry a send or a grouped receive.
#pragma once

#include <cstddef>

#include "abi/nccl_abi.h"

namespace nnf::core {
class SendComm;
class RecvComm;
struct Request;
struct MemoryHandle;
}  // namespace nnf::core

namespace nnf::protocol {

class Protocol {
 public:
  virtual ~Protocol() = default;
  virtual const char* name() const = 0;

  // Fill and post the operations of `request` (device lock held). On failure nothing stays
  // posted for this request and the result says why.
  virtual abi::Result postSend(core::SendComm& comm, core::Request& request, void* data,
                               size_t size, int tag, core::MemoryHandle* handle) = 0;
  virtual abi::Result postRecv(core::RecvComm& comm, core::Request& request, int count,
                               void* const* data, const size_t* sizes, const int* tags,
                               core::MemoryHandle* const* handles) = 0;
};

}  // namespace nnf::protocol
