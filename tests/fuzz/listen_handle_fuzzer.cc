// Fuzzes decodeListenHandle: NCCL hands connect() 128 bytes that came from another rank (or
// from a job of another version, or from nowhere). Whatever the bytes, the decoder must not read
// past them and must accept only handles that satisfy every rule it claims to check.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/tags.h"
#include "core/wire.h"
#include "fuzz_common.h"

namespace nnf::test {
namespace {

using core::wire::ListenHandle;

const char* const kProviders[] = {"tcp", "shm", "efa", "tcp;ofi_rxm"};

void checkDecoded(const ListenHandle& handle, const std::string& provider) {
  NNF_FUZZ_CHECK(handle.magic == ListenHandle::kMagic);
  NNF_FUZZ_CHECK(handle.version == core::wire::kVersion);
  NNF_FUZZ_CHECK(handle.providerHash == core::wire::providerHash(provider));
  NNF_FUZZ_CHECK(handle.addressLength >= 1 &&
                 handle.addressLength <= core::wire::kMaxAddressLength);
  NNF_FUZZ_CHECK(handle.listenerId <= core::tags::kMaxCommId);
}

void decodeOnce(const uint8_t* data, size_t size, const std::string& provider) {
  // Copy into an exact-size heap block so that ASan sees any read past the end of the input.
  std::vector<uint8_t> exact(data, data + size);
  ListenHandle out;
  memset(&out, 0xEE, sizeof(out));
  std::string reason;
  bool ok = core::wire::decodeListenHandle(exact.empty() ? nullptr : exact.data(), exact.size(),
                                           provider, &out, &reason);
  if (ok) {
    checkDecoded(out, provider);
  } else {
    // The caller logs the reason in its WARN: an empty one would make a useless message.
    NNF_FUZZ_CHECK(!reason.empty());
  }
}

}  // namespace
}  // namespace nnf::test

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nnf::test::kProviders;
  if (size == 0) return 0;
  // The first byte picks the provider this side claims to use and whether to stamp the right
  // provider hash into the handle: a 32-bit FNV hash is beyond what mutation finds, and without
  // it the fuzzer would never get past that check to the length and id checks.
  const std::string provider = kProviders[data[0] % 4];
  bool stampHash = (data[0] & 0x80) != 0;
  const uint8_t* body = data + 1;
  size_t bodySize = size - 1;

  // As given: any size, exercising the size check.
  nnf::test::decodeOnce(body, bodySize, provider);

  // Padded or cut to the 128 bytes connect() always passes.
  uint8_t handle[sizeof(nnf::core::wire::ListenHandle)] = {};
  memcpy(handle, body, bodySize < sizeof(handle) ? bodySize : sizeof(handle));
  if (stampHash) {
    uint32_t hash = nnf::core::wire::providerHash(provider);
    memcpy(handle + offsetof(nnf::core::wire::ListenHandle, providerHash), &hash, sizeof(hash));
  }
  nnf::test::decodeOnce(handle, sizeof(handle), provider);
  return 0;
}
