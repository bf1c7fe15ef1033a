// Fuzzes decodeListenHandle: NCCL hands connect() 128 bytes that came from another rank (or
// from a job of another version, or from nowhere). Whatever the bytes, the decoder must not read
// past them and must accept exactly the handles that satisfy every rule it claims to check.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/tags.h"
#include "core/wire.h"
#include "fuzz_common.h"
#include "handle_input.h"

namespace nnf::test {
namespace {

using core::wire::ListenHandle;

// The rules, written out independently of the decoder: a 128-byte handle is valid iff each holds.
bool obeysEveryRule(const ListenHandle& handle, const std::string& provider) {
  return handle.magic == ListenHandle::kMagic && handle.version == core::wire::kVersion &&
         handle.checksum == core::wire::handleChecksum(handle) &&
         handle.providerHash == core::wire::providerHash(provider) && handle.addressLength >= 1 &&
         handle.addressLength <= core::wire::kMaxAddressLength && handle.rails >= 1 &&
         handle.rails <= core::wire::kMaxRails &&
         size_t{handle.rails} * handle.addressLength <= core::wire::kMaxAddressLength &&
         handle.listenerId <= core::tags::kMaxCommId;
}

// What was accepted is what the encoder makes from the decoded fields, up to what the encoder
// leaves zero (connect token, reserved word, address tail) and the checksum over them.
void checkReencodes(const ListenHandle& decoded, const std::string& provider) {
  const uint8_t* more[core::wire::kMaxRails - 1] = {};
  for (size_t r = 1; r < decoded.rails; ++r) more[r - 1] = decoded.railAddress(r);
  ListenHandle again =
      core::wire::makeListenHandle(decoded.listenerId, provider, decoded.address,
                                   decoded.addressLength, more, decoded.rails - 1u);
  ListenHandle normal = decoded;
  normal.connectToken = 0;
  normal.reserved = 0;
  const size_t used = size_t{normal.rails} * normal.addressLength;
  memset(normal.address + used, 0, core::wire::kMaxAddressLength - used);
  normal.checksum = core::wire::handleChecksum(normal);
  NNF_FUZZ_CHECK(memcmp(&again, &normal, sizeof(again)) == 0);
}

void decodeOnce(const uint8_t* data, size_t size, const std::string& provider) {
  // Copy into an exact-size heap block so that ASan sees any read past the end of the input.
  std::vector<uint8_t> exact(data, data + size);
  ListenHandle out;
  memset(&out, 0xEE, sizeof(out));
  std::string reason;
  bool ok = core::wire::decodeListenHandle(exact.empty() ? nullptr : exact.data(), exact.size(),
                                           provider, &out, &reason);
  if (size != sizeof(ListenHandle)) {
    NNF_FUZZ_CHECK(!ok);
  } else {
    ListenHandle given;
    memcpy(&given, data, sizeof(given));
    // Accepted iff valid: a missing check accepts too much, a wrong one refuses a good handle.
    NNF_FUZZ_CHECK(ok == obeysEveryRule(given, provider));
    if (ok) {
      NNF_FUZZ_CHECK(memcmp(&out, &given, sizeof(out)) == 0);
      checkReencodes(out, provider);
    }
  }
  // The caller logs the reason in its WARN: an empty one would make a useless message.
  if (!ok) NNF_FUZZ_CHECK(!reason.empty());
}

}  // namespace
}  // namespace nnf::test

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace input = nnf::test::handle_input;
  using nnf::core::wire::ListenHandle;
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const std::string provider = input::provider(control);
  const uint8_t* body = data + 1;
  size_t bodySize = size - 1;

  // As given: any size, exercising the size check.
  nnf::test::decodeOnce(body, bodySize, provider);

  // Padded or cut to the 128 bytes connect() always passes, with the hash and the checksum
  // written in as the control byte asks, so that mutations reach the checks behind them.
  ListenHandle handle;
  memset(&handle, 0, sizeof(handle));
  memcpy(&handle, body, bodySize < sizeof(handle) ? bodySize : sizeof(handle));
  if (control & input::kStampHash) handle.providerHash = nnf::core::wire::providerHash(provider);
  if (control & input::kReseal) handle.checksum = nnf::core::wire::handleChecksum(handle);
  nnf::test::decodeOnce(reinterpret_cast<const uint8_t*>(&handle), sizeof(handle), provider);
  return 0;
}
