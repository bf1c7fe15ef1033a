// A registrar decorator for tests and tools: records every call, then forwards it to an inner
// registrar or, without one, fakes a successful registration with distinct desc/key values.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "memory/region.h"

namespace nnf::memory {

class RecordingRegistrar : public Registrar {
 public:
  struct Call {
    bool registration;  // false: a deregistration
    const void* base;
    size_t length;
    MemType type;
    int device;
    uint64_t access;
    int result;
  };

  explicit RecordingRegistrar(Registrar* inner = nullptr) : inner_(inner) {}

  int registerRegion(const Region& region, Registration* out) override;
  int deregister(Registration& registration) override;

  // The next `count` registrations fail with `error` (a negative code) without being forwarded.
  void failNext(int error, int count = 1);

  std::vector<Call> calls() const;
  size_t registrations() const;
  size_t deregistrations() const;
  // Registrations not yet deregistered.
  long live() const;
  void clear();

 private:
  Registrar* inner_;
  mutable std::mutex mutex_;
  std::vector<Call> calls_;
  int failError_ = 0;
  int failCount_ = 0;
  uint64_t nextFake_ = 1;
};

}  // namespace nnf::memory
