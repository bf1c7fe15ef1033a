// FNV-1a, 32 and 64 bits: the one hash behind values that must come out the same in every run,
// on every host and in every plugin version (a device's guid, the listen handle's provider hash
// and checksum, the host id two peers compare), so its constants and byte order never change.
// Here, the lowest layer that needs it; core includes it from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace nnf::topology {

inline uint32_t fnv1a32(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t hash = 2166136261u;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 16777619u;
  return hash;
}

inline uint64_t fnv1a64(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

inline uint32_t fnv1a32(std::string_view text) {
  return fnv1a32(text.data(), text.size());
}

inline uint64_t fnv1a64(std::string_view text) {
  return fnv1a64(text.data(), text.size());
}

}  // namespace nnf::topology
