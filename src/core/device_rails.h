// What a device runs over: its rails (NICs, leader first) as the layers above read them, the
// operation engine that moves its operations on them, the registrars of their domains, and the
// lock that serialises every call into them. The plugin opens them over libfabric for each
// planned device (core/fabric_rails.h); a unit test provides them in memory
// (tests/support/fake_fabric.h) and gets real Devices, comms and protocols over them.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>

#include "core/operation_engine.h"
#include "fabric/domain_lock.h"
#include "fabric/rail_attributes.h"
#include "memory/region.h"

namespace nnf::core {

// What opening the rails narrowed: endpoint options the provider refused (platform::verdictOf).
struct RailVerdict {
  bool hostMemoryOnly = false;  // GPU buffers must not be offered
  bool noReadFlush = false;     // no GPUDirect flush by RDMA read
  bool ll128Ok = true;          // NCCL's LL128 is safe over these rails
};

class DeviceRails {
 public:
  virtual ~DeviceRails() = default;

  // The device's lock (FI_THREAD_DOMAIN asks for it): every call into the rails, the engine and
  // the registrars' *Locked calls runs under it.
  fabric::DomainLock& lock() { return lock_; }

  virtual size_t railCount() const = 0;
  virtual const fabric::RailAttributes& rail(size_t index) const = 0;
  // Inserts a peer's endpoint address into rail `rail`'s address vector: 0 and *out set, or a
  // negative libfabric error.
  virtual int insertAddress(size_t rail, const uint8_t* address, size_t length, fi_addr_t* out) = 0;
  // Removes a peer's address from a rail: the provider completes nothing more for it there.
  virtual int removeAddress(size_t rail, fi_addr_t address) = 0;
  // Whether writes the device already holds may be taken back by removing their peer's address
  // (platform::postedWritesTakenBackSafely).
  virtual bool takesBackPostedWritesSafely() const = 0;
  virtual OperationEngine& engine() = 0;
  // The leader's registrar (control buffers, the protocols' per-device arenas), and the one that
  // registers data buffers on every rail (the leader's where there is one rail).
  virtual memory::Registrar& leaderRegistrar() = 0;
  virtual memory::Registrar& dataRegistrar() = 0;
  virtual RailVerdict verdict() const = 0;
  // Closes the endpoints and registrations: the provider holds nothing of the device's after it
  // (the device's teardown, before its comms go). The engine may not be used again.
  virtual void close() = 0;

 private:
  fabric::DomainLock lock_;
};

}  // namespace nnf::core
