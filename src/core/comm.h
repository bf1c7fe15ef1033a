// Base of every comm handed to NCCL. A comm belongs to one device, has an id unique on that
// device (it goes into the tag of every message addressed to it) and owns the operations it posts.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/control_arena.h"
#include "core/operation.h"
#include "core/wire.h"

namespace nnf::core {

class Device;
class Comm;

// kRma: the one-sided RMA layer's listeners and groups (src/rma), never handed to the net ABI.
enum class CommKind : uint8_t { kListen, kSend, kRecv, kRma };

// What NCCL holds for a comm: a plain struct inside the comm, so that validating a pointer
// NCCL hands back reads plain data (a magic and a kind) before anything polymorphic is touched.
struct CommRef {
  static constexpr uint32_t kMagicAlive = 0x4d4d4f43u;   // "COMM"
  static constexpr uint32_t kMagicClosed = 0x44534c43u;  // "CLSD"
  uint32_t magic = kMagicAlive;
  CommKind kind = CommKind::kListen;
  Comm* comm = nullptr;
};

class Comm : public OperationOwner {
 public:
  using Kind = CommKind;

  Comm(Device& device, Kind kind, uint32_t id) : device_(device), kind_(kind), id_(id) {
    ref_.kind = kind;
    ref_.comm = this;
  }
  virtual ~Comm();

  // The opaque pointer NCCL gets, and the way back from it (nullptr when `handle` is not a live
  // comm: the caller logs).
  void* handle() { return &ref_; }
  static Comm* fromHandle(const void* handle) {
    if (handle == nullptr) return nullptr;
    CommRef ref;
    memcpy(&ref, handle, sizeof(ref));
    return ref.magic == CommRef::kMagicAlive ? ref.comm : nullptr;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  Device& device() const { return device_; }
  Kind kind() const { return kind_; }
  uint32_t id() const { return id_; }
  bool alive() const { return ref_.magic == CommRef::kMagicAlive && !closed_; }
  bool closed() const { return closed_; }

  // Completion callbacks (OperationOwner), called by the device with its lock held.

  // A control message addressed to this comm arrived on the device's control channel (device
  // lock held) on `rail`; `data` is valid only during the call. Ignored by default (pings).
  virtual void onControlMessage(wire::ControlKind kind, const uint8_t* data, size_t length,
                                size_t rail) {}

  // Marks the comm closed and asks the provider to cancel what it still holds. The device keeps
  // the object until nothing is in flight any more.
  void close();
  // Operations of this comm still held by the provider.
  virtual int inFlight() const = 0;
  // Those of them that read or write the caller's buffers (data requests): once none is left,
  // closing may return. Set-up messages and pings use the device's own buffers.
  virtual int callerOpsInFlight() const { return 0; }
  // Closing: true once the peer is known to be gone (then nothing it sends can still arrive).
  // Checks now (the caller rate-limits): the pid on this host, else a ping whose failure tells.
  virtual bool peerGone() { return false; }
  // The device is going: end every use of a memory registration the comm still holds, while
  // the registry lives (the comm itself goes after the endpoint has closed).
  virtual void releaseRegistrations() {}
  // The device removed a peer's address from rail `rail` and inserted it again
  // (Device::releaseStranded): where the comm kept `from` for it, it keeps `to`.
  virtual void replacePeer(size_t rail, fi_addr_t from, fi_addr_t to) {}
  // A closing thread waits on this comm: the device must not free it yet.
  bool held() const { return held_; }
  void setHeld(bool held) { held_ = held; }

 protected:
  virtual void cancelInFlight() = 0;
  // Cancels and unqueues one operation (helper for cancelInFlight).
  void cancel(Operation& op);
  // Takes this comm's slot for set-up messages (device lock held); false when none (logged).
  bool acquireControl();
  const ControlSlot& control() const { return control_; }

 private:
  CommRef ref_;
  ControlSlot control_;
  Device& device_;
  Kind kind_;
  uint32_t id_;
  bool closed_ = false;
  bool held_ = false;
};

}  // namespace nnf::core
