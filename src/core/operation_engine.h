// The operation engine: the one object that hands a device's operations to its rails and reads
// back what ended. Protocols and comms reach it through the device (Device::post, inject,
// cancel, unqueue, progress: thin forwards), which owns the engine with its rails
// (core/device_rails.h). The engine calls an operation's owner (op.owner->onComplete / onError,
// with op.inFlight cleared) and gives the device the peers' writes (EngineEvents), which the
// device dispatches to its protocol or to the RMA layer.
//
// Over libfabric: core/fabric_engine.h. In unit tests: an in-memory engine that reorders and
// delays completions (tests/support/fake_fabric.h), under the real protocols and comms.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/operation.h"
#include "nccl_net/types.h"

namespace nnf::core {

class ScratchArea;

// What an engine reads besides its own operations' completions: the peers' RMA writes. The
// device implements it (device lock held).
class EngineEvents {
 public:
  // A peer's write with immediate `data` landed here on rail `rail`: `length` bytes.
  virtual void onRemoteWrite(size_t rail, uint64_t data, size_t length) = 0;
  // A peer's write into this device failed here; `data` is its immediate data. True when a comm
  // took the failure (the engine reports the rest once).
  virtual bool onRemoteWriteError(uint64_t data, const char* why) = 0;
  // One of our operations on rail `rail` failed with `error` (positive; `text`: the provider's
  // words, may be null), just before its owner hears of it: the device judges the rail.
  virtual void onTransferError(size_t rail, const Operation& op, int error, const char* text) = 0;
  // Rail `rail`'s endpoint reported an error of its own (`error` positive; `text`: libfabric's
  // words): efa's handshake with a peer failed, for one.
  virtual void onEndpointError(size_t rail, int error, const char* text) = 0;

 protected:
  ~EngineEvents() = default;
};

class OperationEngine {
 public:
  virtual ~OperationEngine() = default;

  // --- every call: device lock held ---

  // Hands `op` to its rail (op.rail), or keeps it waiting in posting order while the provider's
  // queue is full: kSuccess either way, op.inFlight or op.queued set. Anything else: the post
  // failed, logged, nothing holds `op`.
  virtual abi::Result post(Operation& op) = 0;
  // Sends (kSend) or writes (kWrite) `op` inline when it fits injectLimit() and nothing waits:
  // no completion follows, the caller's buffer is free on return (the delivery to the peer may
  // still be under way). kInProgress: use post().
  virtual abi::Result inject(const Operation& op) = 0;
  // Asks the provider to give `op` back: an unmatched receive completes with FI_ECANCELED;
  // anything else completes on its own.
  virtual void cancel(Operation& op) = 0;
  // Takes a waiting (op.queued) operation back; nothing for one that is not waiting.
  virtual void unqueue(Operation& op) = 0;
  // Forgets `op`, in flight: the provider will never complete it (its peer's address was
  // removed from the rail). Its place in the queue is free again; the caller ends it.
  virtual void release(Operation& op) = 0;
  // Reads what ended and dispatches it (owners, `events`), then posts what waits.
  virtual abi::Result progress(EngineEvents& events) = 0;
  // Operations wait in the engine for room in the provider's queues: only progress() posts them.
  virtual bool holdsWaiting() const = 0;

  // --- constant once the engine is built ---

  // Largest inject (0: none); inject copies with the CPU: callers use it for host memory only.
  virtual size_t injectLimit() const = 0;
  // The provider delivers one endpoint's operations to a peer in the order posted (shm, tcp): a
  // later message cannot overtake an earlier write.
  virtual bool deliversInOrder() const = 0;
  // Receives posted with Operation::withRoom take `room` after their buffer (set by the device
  // before it posts any).
  virtual void setReceiveRoom(ScratchArea* room) = 0;

  // The clock the protocols' timing decisions read (quiet times, late descriptions, stall
  // checks), monotonic ns: the steady clock over libfabric, the fabric's own seeded clock in unit
  // tests (so that a run whose decisions depend on time repeats).
  virtual uint64_t nowNs() const = 0;
};

}  // namespace nnf::core
