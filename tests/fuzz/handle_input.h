// The listen-handle fuzzer's control byte (the first input byte), shared by the fuzzer, the seed
// generator and the seed test: which provider this side claims, and which of the two values that
// mutation cannot guess the fuzzer writes into the handle itself.
#pragma once

#include <cstdint>

namespace nnf::test::handle_input {

inline const char* const kProviders[] = {"tcp", "shm", "efa", "tcp;ofi_rxm"};
inline const char* provider(uint8_t control) {
  return kProviders[control % 4];
}
// Stamp this provider's hash: a 32-bit FNV hash is beyond what mutation finds.
constexpr uint8_t kStampHash = 0x80;
// Recompute the checksum over the (mutated) handle: without it no mutated handle gets past the
// checksum to the provider, address length and listener id checks.
constexpr uint8_t kReseal = 0x40;

}  // namespace nnf::test::handle_input
