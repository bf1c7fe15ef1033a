// The one receive path of a device for everything that is not data: connection requests, accept
// messages, pings and the rdma protocol's close handshake (kClosed, kClosedAck; its descriptors
// and credits are RMA writes into the peer's ring, not control messages). Control messages are
// untagged (data is tagged: the two never meet), start with a wire::ControlHeader naming the
// comm, and land in a fixed ring of untagged receives; each completion is dispatched by that
// id and the receive is posted again at once. Untagged rather than tagged with ignore bits:
// libfabric 1.x shm matches later unexpected messages with the ignore mask of a completed
// wildcard receive (tests/functional/provider_quirks_test.cc). So the number of posted control
// receives is fixed per device, whatever the number of comms: no listener, handshake or liveness
// check keeps a receive of its own in the provider's queue (the 1,024-entry queue of shm and tcp
// would otherwise cap the number of comms).
//
// A message for an id that names no open comm (closed, or never opened) is counted and dropped.
//
// On a device of several rails the ring is posted on each, and a connected comm's messages go on
// the first of its rails that is up (the leader while it is): a message whose rail broke under
// it goes again on another (sendAgain). Connect and accept messages go on the leader (the peer's
// other rails are not known yet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/control_arena.h"
#include "core/operation.h"
#include "core/wire.h"
#include "nccl_net/types.h"

namespace nnf::core {

class Device;
class DataComm;

class ControlChannel final : public OperationOwner {
 public:
  // Largest control payload (the receive buffer is one byte more, so a longer one is seen).
  static constexpr size_t kMaxPayload = ControlSlot::kSize - sizeof(wire::ControlHeader) - 1;

  // `receives` on each of the device's rails.
  ControlChannel(Device& device, size_t receives);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Posts the ring (device lock held). False, logged, when a buffer or a receive cannot be had;
  // calling it again posts what is missing.
  bool start();
  // Writes header and payload into `buffer` (kMaxPayload + header bytes, registered with `desc`
  // where the provider needs it: a comm's control slot) and posts `op` as a control send to
  // comm `remoteId` of the peer. The buffer must stay until the send completes.
  abi::Result send(Operation& op, uint8_t* buffer, void* desc, fi_addr_t peer, uint32_t remoteId,
                   wire::ControlKind kind, const void* payload, size_t length);

  // The same for a connected comm's message, on the first of `comm`'s rails that is up (its peer
  // and `slot`'s descriptor there); `slot` holds `buffer`.
  abi::Result send(Operation& op, uint8_t* buffer, const ControlSlot& slot, const DataComm& comm,
                   wire::ControlKind kind, const void* payload, size_t length);
  // The same on `rail` (a ping that witnesses for the comm's other rails, the leader among them).
  abi::Result sendVia(size_t rail, Operation& op, uint8_t* buffer, const ControlSlot& slot,
                      const DataComm& comm, wire::ControlKind kind, const void* payload,
                      size_t length);
  // A set-up message of `comm` (connect, accept) in `slot`, on `rail` to comm `remoteId` of the
  // peer there: the comm knows its peer's rails before it knows its remote id.
  abi::Result sendSetUp(size_t rail, Operation& op, const ControlSlot& slot, const DataComm& comm,
                        uint32_t remoteId, wire::ControlKind kind, const void* payload,
                        size_t length);
  // `op`, sent by either call above, failed with `error`: when that says its rail's path broke and
  // another of `comm`'s rails is up, the same bytes go again there (true: `op` is in flight
  // again; its owner hears of its end as before). The receiver may get it twice (the first may
  // have landed): every control message of a connected comm is one it can take twice.
  bool sendAgain(Operation& op, const ControlSlot& slot, const DataComm& comm, int error);

  void onComplete(Operation& op, size_t length) override;
  void onError(Operation& op, int error, size_t overflow, const char* text) override;

 private:
  struct Entry {
    Operation op;  // first: its context leads back to the entry
    ControlSlot slot;
    uint8_t rail = 0;
  };
  abi::Result sendOn(size_t rail, Operation& op, uint8_t* buffer, void* desc, fi_addr_t peer,
                     uint32_t remoteId, wire::ControlKind kind, const void* payload, size_t length);
  void repost(Entry& entry);

  Device& device_;
  std::vector<std::unique_ptr<Entry>> entries_;
  bool warned_ = false;
};

}  // namespace nnf::core
