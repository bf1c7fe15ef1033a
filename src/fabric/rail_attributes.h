// What the layers above the operation engine read of one rail (NIC): the provider's description
// of it, its endpoint's address and the size options the protocols ask for. fabric::Rail answers
// for an endpoint it opened; a unit test answers from memory (tests/support/fake_fabric.h).
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fabric/legacy_mr_bits.h"

namespace nnf::fabric {

class RailAttributes {
 public:
  // The fi_info the rail was opened with (read only).
  virtual const fi_info* info() const = 0;
  // The endpoint's address as raw bytes (what a peer inserts into its address vector).
  virtual const std::vector<uint8_t>& address() const = 0;
  // Reads a size_t endpoint option: 0 and *out set, or the provider's negative answer.
  virtual int sizeOption(int level, int name, size_t* out) const = 0;

  size_t injectSize() const {
    return info()->tx_attr != nullptr ? info()->tx_attr->inject_size : 0;
  }
  // Bytes of immediate data the provider carries (EFA 4, shm and tcp 8).
  size_t cqDataSize() const {
    return info()->domain_attr != nullptr ? info()->domain_attr->cq_data_size : 0;
  }
  // Whether the provider needs a descriptor for local buffers (FI_MR_LOCAL).
  bool needsLocalRegistration() const {
    return (info()->domain_attr != nullptr && (info()->domain_attr->mr_mode & FI_MR_LOCAL) != 0) ||
           (info()->mode & kLegacyLocalMrMode) != 0;
  }

 protected:
  ~RailAttributes() = default;
};

}  // namespace nnf::fabric
