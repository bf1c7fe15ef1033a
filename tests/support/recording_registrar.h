// A test double of memory::Registrar: records every call, then forwards it to an inner
// registrar or, without one, fakes a successful registration with distinct desc/key values.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "memory/region.h"

namespace nnf::test {

class RecordingRegistrar : public memory::Registrar {
 public:
  struct Call {
    bool registration;  // false: a deregistration
    const void* base;
    size_t length;
    memory::MemType type;
    int device;
    uint64_t access;
    int result;
  };

  explicit RecordingRegistrar(memory::Registrar* inner = nullptr) : inner_(inner) {}

  int registerRegion(const memory::Region& region, memory::Registration* out) override;
  int deregister(memory::Registration& registration) override;

  // The next `count` registrations fail with `error` (a negative code) without being forwarded.
  void failNext(int error, int count = 1);

  std::vector<Call> calls() const;
  size_t registrations() const;
  size_t deregistrations() const;
  // Registrations not yet deregistered.
  long live() const;
  void clear();

 private:
  memory::Registrar* inner_;
  mutable std::mutex mutex_;
  std::vector<Call> calls_;
  int failError_ = 0;
  int failCount_ = 0;
  uint64_t nextFake_ = 1;
};

}  // namespace nnf::test
