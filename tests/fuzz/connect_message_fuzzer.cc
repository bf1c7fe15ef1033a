// Fuzzes decodeConnectMessage: the first bytes a listener receives from anyone who can reach its
// endpoint. A message that decodes must be one the encoder could have produced; nothing may be
// read past the bytes that arrived.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/tags.h"
#include "core/wire.h"
#include "fuzz_common.h"
#include "message_fuzz.h"

namespace nnf::test {
namespace {

using core::wire::ConnectMessage;

// Encodes what was decoded and compares bytes: the encoder must give back the very message,
// except for what it takes from this process (pid, host id) and the bytes it leaves zero
// (the address past its length). Decoding the re-encoded message gives the same fields.
core::wire::RailAddresses railsOf(const ConnectMessage& decoded) {
  const uint8_t* rails[core::wire::kMaxRails - 1];
  for (size_t r = 0; r + 1 < core::wire::kMaxRails; ++r) {
    rails[r] = decoded.rails.railAddresses[r];
  }
  return core::wire::makeRailAddresses(decoded.rails.rails, rails, decoded.rails.railAddressLength);
}

void checkReencodes(const std::vector<uint8_t>& bytes, const ConnectMessage& decoded) {
  ConnectMessage expected = fromThisProcess<ConnectMessage>(bytes);
  memset(expected.address + expected.addressLength, 0,
         core::wire::kMaxAddressLength - expected.addressLength);
  ConnectMessage again =
      core::wire::makeConnectMessage(decoded.senderCommId, decoded.listenerId, decoded.address,
                                     decoded.addressLength, decoded.protocol, decoded.ringAddress,
                                     decoded.ringKey, decoded.ringRailKeys, railsOf(decoded));
  NNF_FUZZ_CHECK(memcmp(&again, &expected, sizeof(again)) == 0);

  ConnectMessage twice;
  std::string reason;
  NNF_FUZZ_CHECK(
      core::wire::decodeConnectMessage(&again, sizeof(again), decoded.listenerId, &twice, &reason));
  NNF_FUZZ_CHECK(twice.senderCommId == decoded.senderCommId);
  NNF_FUZZ_CHECK(twice.listenerId == decoded.listenerId);
  NNF_FUZZ_CHECK(twice.addressLength == decoded.addressLength);
  NNF_FUZZ_CHECK(memcmp(twice.address, decoded.address, decoded.addressLength) == 0);
}

void decodeOnce(const std::vector<uint8_t>& bytes, uint32_t expectedListener) {
  ConnectMessage out;
  if (!decodesAsArrived(bytes, expectedListener, core::wire::decodeConnectMessage, &out)) return;
  NNF_FUZZ_CHECK(out.listenerId == expectedListener);
  NNF_FUZZ_CHECK(out.senderCommId <= core::tags::kMaxCommId);
  NNF_FUZZ_CHECK(out.addressLength >= 1 && out.addressLength <= core::wire::kMaxAddressLength);
  checkReencodes(bytes, out);
}

}  // namespace
}  // namespace nnf::test

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nnf::test::decodeForFixedAndNamedId(
      data, size, offsetof(nnf::core::wire::ConnectMessage, listenerId), nnf::test::decodeOnce);
  return 0;
}
