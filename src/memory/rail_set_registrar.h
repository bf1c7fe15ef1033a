// Registers every region with each rail's domain, so that data can move on any NIC of a
// multi-rail device: the first rail's answer fills the registration's own fields, the others
// its `rails` entries. All or nothing: a refusal on one rail undoes the others.
#pragma once

#include <vector>

#include "memory/fabric_registrar.h"
#include "memory/region.h"

namespace nnf::memory {

class RailSetRegistrar : public Registrar {
 public:
  // One registrar per rail, leader first (1..kMaxRails); they outlive this object.
  explicit RailSetRegistrar(std::vector<FabricRegistrar*> rails);

  int registerRegion(const Region& region, Registration* out) override;
  int deregister(Registration& registration) override;
  // The same under the device's lock (the rdma protocol's rings and bounce areas, registered on
  // every rail so that descriptors and eager messages may go on any).
  int registerLocked(const Region& region, Registration* out) override;
  int deregisterLocked(Registration& registration) override;
  size_t railCount() const { return rails_.size(); }

 private:
  int registerOnEvery(const Region& region, Registration* out, bool locked);
  int deregisterFromEvery(Registration& registration, bool locked);

  std::vector<FabricRegistrar*> rails_;
};

}  // namespace nnf::memory
