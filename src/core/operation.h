// One libfabric operation in flight: a tagged send or receive (data, drains), an untagged one
// (the control channel), an RMA read (flushes, eager copies into GPU memory) or an RMA write with
// immediate data (the rdma protocol). Its address is the completion context handed to the
// provider, so the fi_context2 scratch space must come first.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace nnf::core {

struct Request;
struct Operation;
struct MemoryHandle;

// Whoever posted an operation hears about its completion (comms, and the device's drain
// receives for closed comm ids). Called by the device with its lock held.
class OperationOwner {
 public:
  virtual void onComplete(Operation& op, size_t length) = 0;
  virtual void onError(Operation& op, int error, size_t overflow, const char* text) = 0;

 protected:
  ~OperationOwner() = default;
};

// kControlSend / kControlRecv: untagged messages of the device's control channel.
// kWrite: an RMA write with immediate data (the rdma protocol).
enum class OpType : uint8_t { kSend, kRecv, kRead, kControlSend, kControlRecv, kWrite };

// For log lines: "send", "receive", "flush read".
inline const char* opTypeName(OpType type) {
  switch (type) {
    case OpType::kSend:
      return "send";
    case OpType::kRecv:
      return "receive";
    case OpType::kRead:
      return "flush read";
    case OpType::kControlSend:
      return "control send";
    case OpType::kControlRecv:
      return "control receive";
    case OpType::kWrite:
      return "write";
  }
  return "operation";
}

// What a protocol keeps with a request's operation beside what the provider is given, one kind
// at a time (Operation's payload union; core never reads them).
// A send whose descriptor has not come yet (the rdma protocol): the message's size, and its
// registration while it waits (NCCL may deregister the buffer meanwhile; null: none).
struct PendingSend {
  uint64_t bytes;
  MemoryHandle* handle;
};
// A posted write of one segment of a message (the rdma protocol): bytes of its share, the part
// of the message its rail carries, after this segment; the (tag, sequence number) of the buffer
// it writes into, which names it to the receiver if the write must be asked about (a rail
// failed); whether it is a share written again after such a failure; and whether it is the
// notice of a send refused for its size (no bytes: its request failed already, but the receiver
// waits for the notice, which goes again like a share when its rail breaks).
struct WriteSegment {
  uint64_t shareLeft;
  int32_t tag;
  uint16_t seq;
  uint8_t resent;
  uint8_t notice;
};
// A read copying an eager message from a bounce entry into GPU memory (the rdma protocol).
struct EagerCopy {
  uint32_t entry;
  bool copying;  // posted and not ended yet
};

struct Operation {
  fi_context2 context;  // provider scratch space (FI_CONTEXT / FI_CONTEXT2 modes)
  OperationOwner* owner = nullptr;
  Request* request = nullptr;  // null for connection set-up messages
  OpType type = OpType::kSend;
  uint8_t index = 0;         // position in a grouped receive
  uint8_t rail = 0;          // the device's rail (NIC) it is posted on: the leader unless rdma
  bool inFlight = false;     // handed to the provider, completion pending
  bool queued = false;       // waiting for a retry after -FI_EAGAIN
  uint8_t headerLength = 0;  // kWrite: bytes of `header` written before `buffer` (0: none)
  // kRecv: posted with the device's scratch area after `buffer` (Device::overflowRoom), so the
  // provider never truncates it; a completion longer than `length` is the overflow.
  bool withRoom = false;
  // A write to this device's own endpoint (the RMA layer's self puts, signals and GPU signal
  // words). efa (libfabric 2.x) refuses one with immediate data (-FI_EOPNOTSUPP: "inconsistent
  // support status on unsolicited write recv") until its handshake with itself, which answers our
  // first message to ourselves, has arrived at a later progress: the engine retries it then.
  bool toOwnEndpoint = false;
  void* buffer = nullptr;
  size_t length = 0;
  void* desc = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t tag = 0;  // kWrite: the immediate data
  // One member a kind of operation; which one is live follows from what the operation is (its
  // type, and who posted it). 8 bytes more than `ignore` alone (208 bytes an operation, not 200).
  union {
    // kRecv: tag bits that need not match (the device's drain receives; 0 elsewhere).
    uint64_t ignore = 0;
    PendingSend pendingSend;  // an rdma send not yet matched with its descriptor
    WriteSegment segment;     // an rdma write of a message's segment
    EagerCopy eagerCopy;      // an rdma read of an eager message into GPU memory
  };
  // kRead, kWrite: address and key at the peer.
  uint64_t remoteAddress = 0;
  uint64_t remoteKey = 0;
  size_t transferred = 0;  // bytes moved, once completed (what test() reports)
  void* header = nullptr;  // kWrite with headerLength: registered, with headerDesc
  void* headerDesc = nullptr;
  // A posted receive's registration, held while the provider may still write through its
  // descriptor (NCCL deregisters before it closes; efa reads into a matched receive after that);
  // null otherwise. Sends hold theirs on the request.
  MemoryHandle* heldRegistration = nullptr;
  Operation* nextQueued = nullptr;  // OpQueue links
  Operation* prevQueued = nullptr;

  static Operation* fromContext(void* context) { return static_cast<Operation*>(context); }
};
static_assert(std::is_standard_layout_v<Operation>);
static_assert(sizeof(Operation) <= 208, "the payload union grew an operation by more than 8 bytes");
static_assert(offsetof(Operation, context) == 0);

// The record an operation is the first member of (the device's own receives keep their buffer
// beside the operation), found from the operation a completion names.
template <typename Record>
Record* recordOf(Operation& op) {
  static_assert(std::is_standard_layout_v<Record> && offsetof(Record, op) == 0);
  return reinterpret_cast<Record*>(&op);
}

}  // namespace nnf::core
