// Fuzzes decodeAcceptMessage: the reply a connecting sender receives, from whoever sent a message
// with the right tag. Only a reply to this very connection may decode.
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

using core::wire::AcceptMessage;

// The encoder gives back the accepted message, except for this process's pid and host id.
void checkReencodes(const std::vector<uint8_t>& bytes, const AcceptMessage& decoded) {
  AcceptMessage expected = fromThisProcess<AcceptMessage>(bytes);
  const uint8_t* rails[core::wire::kMaxRails - 1];
  for (size_t r = 0; r + 1 < core::wire::kMaxRails; ++r) {
    rails[r] = decoded.rails.railAddresses[r];
  }
  AcceptMessage again = core::wire::makeAcceptMessage(
      decoded.recvCommId, decoded.senderCommId, decoded.protocol,
      core::wire::makeRailAddresses(decoded.rails.rails, rails, decoded.rails.railAddressLength));
  NNF_FUZZ_CHECK(memcmp(&again, &expected, sizeof(again)) == 0);
}

void decodeOnce(const std::vector<uint8_t>& bytes, uint32_t expectedSender) {
  AcceptMessage out;
  if (!decodesAsArrived(bytes, expectedSender, core::wire::decodeAcceptMessage, &out)) return;
  NNF_FUZZ_CHECK(out.senderCommId == expectedSender);
  NNF_FUZZ_CHECK(out.recvCommId <= core::tags::kMaxCommId);
  NNF_FUZZ_CHECK(out.rails.rails >= 1 && out.rails.rails <= core::wire::kMaxRails);
  NNF_FUZZ_CHECK(out.rails.railAddressLength <= core::wire::kMaxRailAddressLength);
  checkReencodes(bytes, out);
}

}  // namespace
}  // namespace nnf::test

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nnf::test::decodeForFixedAndNamedId(
      data, size, offsetof(nnf::core::wire::AcceptMessage, senderCommId), nnf::test::decodeOnce);
  return 0;
}
