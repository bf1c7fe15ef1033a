#include "memory/rail_set_registrar.h"

#include <stdexcept>

namespace nnf::memory {

RailSetRegistrar::RailSetRegistrar(std::vector<FabricRegistrar*> rails) : rails_(std::move(rails)) {
  if (rails_.empty() || rails_.size() > kMaxRails)
    throw std::invalid_argument("a rail set holds 1 to kMaxRails registrars");
}

int RailSetRegistrar::registerRegion(const Region& region, Registration* out) {
  Registration leader;
  int rc = rails_[0]->registerRegion(region, &leader);
  if (rc != 0) return rc;  // logged by the registrar
  for (size_t r = 1; r < rails_.size(); ++r) {
    Registration other;
    rc = rails_[r]->registerRegion(region, &other);
    if (rc != 0) {
      leader.railCount = static_cast<uint8_t>(r);
      deregister(leader);
      return rc;
    }
    leader.rails[r - 1] = Registration::Rail{other.desc, other.key, other.provider};
  }
  leader.railCount = static_cast<uint8_t>(rails_.size());
  *out = leader;
  return 0;
}

int RailSetRegistrar::deregister(Registration& registration) {
  int first = 0;
  for (size_t r = registration.railCount; r-- > 1;) {
    Registration other;
    other.desc = registration.rails[r - 1].desc;
    other.key = registration.rails[r - 1].key;
    other.provider = registration.rails[r - 1].provider;
    other.base = registration.base;
    other.length = registration.length;
    int rc = rails_[r]->deregister(other);
    if (rc != 0 && first == 0) first = rc;
    registration.rails[r - 1] = Registration::Rail{};
  }
  registration.railCount = 1;
  int rc = rails_[0]->deregister(registration);
  return first != 0 ? first : rc;
}

}  // namespace nnf::memory
