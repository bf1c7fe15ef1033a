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

namespace nnf::test {
namespace {

using core::wire::AcceptMessage;

// The encoder gives back the accepted message, except for this process's pid and host id.
void checkReencodes(const std::vector<uint8_t>& bytes, const AcceptMessage& decoded) {
  AcceptMessage expected;
  memcpy(&expected, bytes.data(), sizeof(expected));
  expected.pid = core::wire::localPid();
  expected.hostId = core::wire::localHostId();
  const uint8_t* rails[core::wire::kMaxRails - 1];
  for (size_t r = 0; r + 1 < core::wire::kMaxRails; ++r) rails[r] = decoded.railAddresses[r];
  AcceptMessage again =
      core::wire::makeAcceptMessage(decoded.recvCommId, decoded.senderCommId, decoded.protocol,
                                    decoded.rails, rails, decoded.railAddressLength);
  NNF_FUZZ_CHECK(memcmp(&again, &expected, sizeof(again)) == 0);
}

void decodeOnce(const std::vector<uint8_t>& bytes, uint32_t expectedSender) {
  AcceptMessage out;
  memset(&out, 0xEE, sizeof(out));
  std::string reason;
  bool ok = core::wire::decodeAcceptMessage(bytes.empty() ? nullptr : bytes.data(), bytes.size(),
                                            expectedSender, &out, &reason);
  if (!ok) {
    NNF_FUZZ_CHECK(!reason.empty());
    return;
  }
  NNF_FUZZ_CHECK(bytes.size() == sizeof(AcceptMessage));
  NNF_FUZZ_CHECK(memcmp(&out, bytes.data(), sizeof(out)) == 0);
  NNF_FUZZ_CHECK(out.magic == AcceptMessage::kMagic);
  NNF_FUZZ_CHECK(out.version == core::wire::kVersion);
  NNF_FUZZ_CHECK(out.length == sizeof(AcceptMessage));
  NNF_FUZZ_CHECK(out.senderCommId == expectedSender);
  NNF_FUZZ_CHECK(out.recvCommId <= core::tags::kMaxCommId);
  NNF_FUZZ_CHECK(out.rails >= 1 && out.rails <= core::wire::kMaxRails);
  NNF_FUZZ_CHECK(out.railAddressLength <= core::wire::kMaxRailAddressLength);
  checkReencodes(bytes, out);
}

}  // namespace
}  // namespace nnf::test

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  nnf::test::decodeOnce(bytes, 7);
  if (size >= offsetof(nnf::core::wire::AcceptMessage, senderCommId) + sizeof(uint32_t)) {
    uint32_t named;
    memcpy(&named, data + offsetof(nnf::core::wire::AcceptMessage, senderCommId), sizeof(named));
    nnf::test::decodeOnce(bytes, named);
  }
  return 0;
}
