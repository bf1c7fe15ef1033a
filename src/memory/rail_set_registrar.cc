#include "memory/rail_set_registrar.h"

#include <stdexcept>

namespace nnf::memory {

RailSetRegistrar::RailSetRegistrar(std::vector<FabricRegistrar*> rails) : rails_(std::move(rails)) {
  if (rails_.empty() || rails_.size() > kMaxRails)
    throw std::invalid_argument("a rail set holds 1 to kMaxRails registrars");
}

int RailSetRegistrar::registerRegion(const Region& region, Registration* out) {
  return registerOnEvery(region, out, /*locked=*/false);
}

int RailSetRegistrar::registerLocked(const Region& region, Registration* out) {
  return registerOnEvery(region, out, /*locked=*/true);
}

int RailSetRegistrar::deregister(Registration& registration) {
  return deregisterFromEvery(registration, /*locked=*/false);
}

int RailSetRegistrar::deregisterLocked(Registration& registration) {
  return deregisterFromEvery(registration, /*locked=*/true);
}

int RailSetRegistrar::registerOnEvery(const Region& region, Registration* out, bool locked) {
  auto one = [&](size_t rail, Registration* registration) {
    return locked ? rails_[rail]->registerLocked(region, registration)
                  : rails_[rail]->registerRegion(region, registration);
  };
  Registration leader;
  int rc = one(0, &leader);
  if (rc != 0) return rc;  // logged by the registrar
  for (size_t r = 1; r < rails_.size(); ++r) {
    Registration other;
    rc = one(r, &other);
    if (rc != 0) {
      leader.railCount = static_cast<uint8_t>(r);
      deregisterFromEvery(leader, locked);
      return rc;
    }
    leader.rails[r - 1] = Registration::Rail{other.desc, other.key, other.provider};
  }
  leader.railCount = static_cast<uint8_t>(rails_.size());
  *out = leader;
  return 0;
}

int RailSetRegistrar::deregisterFromEvery(Registration& registration, bool locked) {
  auto one = [&](size_t rail, Registration& r) {
    return locked ? rails_[rail]->deregisterLocked(r) : rails_[rail]->deregister(r);
  };
  int first = 0;
  for (size_t r = registration.railCount; r-- > 1;) {
    Registration other;
    other.desc = registration.rails[r - 1].desc;
    other.key = registration.rails[r - 1].key;
    other.provider = registration.rails[r - 1].provider;
    other.base = registration.base;
    other.length = registration.length;
    int rc = one(r, other);
    if (rc != 0 && first == 0) first = rc;
    registration.rails[r - 1] = Registration::Rail{};
  }
  registration.railCount = 1;
  int rc = one(0, registration);
  return first != 0 ? first : rc;
}

}  // namespace nnf::memory
