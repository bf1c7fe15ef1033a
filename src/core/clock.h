// Monotonic time in nanoseconds (vDSO-backed: cheap enough for the data path).
#pragma once

#include <chrono>
#include <cstdint>

namespace nnf::core {

inline uint64_t nowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace nnf::core
