// What a memory registration is made of, independent of the provider: the region the caller
// names, the provider's answer, and the interface every registrar implements. The MR cache and
// the core only ever talk to `Registrar`, so tests can swap in a recording fake.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nnf::memory {

// NICs one device may drive at once (a p5 has four per GPU); every registration holds a key and
// descriptor for each.
constexpr size_t kMaxRails = 4;

enum class MemType : int {
  kHost = 0,    // ordinary process memory
  kCuda = 1,    // CUDA device memory, registered by virtual address with the device ordinal
  kDmaBuf = 2,  // CUDA device memory exported as a DMA-BUF file descriptor
};

const char* memTypeName(MemType type);

// Access bits in libfabric's own encoding (FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ,
// FI_REMOTE_WRITE): the registrar passes them through; the cache needs them to decide hits.
struct Region {
  const void* base = nullptr;
  size_t length = 0;
  MemType type = MemType::kHost;
  int device = -1;            // CUDA ordinal for kCuda / kDmaBuf; ignored for host memory
  int dmabufFd = -1;          // kDmaBuf only
  uint64_t dmabufOffset = 0;  // kDmaBuf only: offset of `base` inside the DMA-BUF
  uint64_t access = 0;
};

// The provider's answer. `desc` goes into the descriptor arrays of data calls, `key` to the
// peer; `remoteBase` is the address the peer must use for `base` (the virtual address under
// FI_MR_VIRT_ADDR, 0 when the provider addresses registrations by offset).
struct Registration {
  void* desc = nullptr;
  uint64_t key = 0;
  uint64_t remoteBase = 0;
  const void* base = nullptr;
  size_t length = 0;
  void* provider = nullptr;  // the registrar's own object (a fid_mr* for FabricRegistrar)
  // Rails after the first (RailSetRegistrar): the same region registered with their domains.
  // Peers address it alike on every rail (the same provider: virtual address or offset 0).
  struct Rail {
    void* desc = nullptr;
    uint64_t key = 0;
    void* provider = nullptr;
  };
  Rail rails[kMaxRails - 1];
  uint8_t railCount = 1;

  uint64_t keyOf(size_t rail) const { return rail == 0 ? key : rails[rail - 1].key; }
  void* descOf(size_t rail) const { return rail == 0 ? desc : rails[rail - 1].desc; }

  // The address a peer uses to reach `ptr`, which must lie inside the registration.
  uint64_t remoteAddress(const void* ptr) const {
    return remoteBase +
           static_cast<uint64_t>(static_cast<const char*>(ptr) - static_cast<const char*>(base));
  }
};

// Registers regions with one provider domain. Return codes are 0 or a negative libfabric error
// (-FI_EINVAL, -FI_EOPNOTSUPP, ...): data paths never throw.
class Registrar {
 public:
  virtual ~Registrar() = default;
  virtual int registerRegion(const Region& region, Registration* out) = 0;
  virtual int deregister(Registration& registration) = 0;
  // The same for callers that already hold the device's domain lock (connection set-up registers
  // its control buffers under it): registrars that take no lock of their own need not override.
  virtual int registerLocked(const Region& region, Registration* out) {
    return registerRegion(region, out);
  }
  virtual int deregisterLocked(Registration& registration) { return deregister(registration); }
};

}  // namespace nnf::memory
