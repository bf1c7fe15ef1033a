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

namespace nnf::test {
namespace {

using core::wire::ConnectMessage;

void decodeOnce(const std::vector<uint8_t>& bytes, uint32_t expectedListener) {
  ConnectMessage out;
  memset(&out, 0xEE, sizeof(out));
  std::string reason;
  bool ok = core::wire::decodeConnectMessage(bytes.empty() ? nullptr : bytes.data(), bytes.size(),
                                             expectedListener, &out, &reason);
  if (!ok) {
    NNF_FUZZ_CHECK(!reason.empty());
    return;
  }
  NNF_FUZZ_CHECK(bytes.size() == sizeof(ConnectMessage));
  NNF_FUZZ_CHECK(out.magic == ConnectMessage::kMagic);
  NNF_FUZZ_CHECK(out.version == core::wire::kVersion);
  NNF_FUZZ_CHECK(out.length == sizeof(ConnectMessage));
  NNF_FUZZ_CHECK(out.listenerId == expectedListener);
  NNF_FUZZ_CHECK(out.senderCommId <= core::tags::kMaxCommId);
  NNF_FUZZ_CHECK(out.addressLength >= 1 && out.addressLength <= core::wire::kMaxAddressLength);
  // Re-encoding what was accepted gives the same fields back: the two sides agree on the format.
  ConnectMessage again = core::wire::makeConnectMessage(out.senderCommId, out.listenerId,
                                                        out.address, out.addressLength);
  NNF_FUZZ_CHECK(again.senderCommId == out.senderCommId);
  NNF_FUZZ_CHECK(memcmp(again.address, out.address, out.addressLength) == 0);
}

}  // namespace
}  // namespace nnf::test

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Exact-size copy: ASan flags any read past what "arrived".
  std::vector<uint8_t> bytes(data, data + size);
  // Against a fixed listener, and against whatever listener the message names, so that the
  // fuzzer reaches the checks after the listener id.
  nnf::test::decodeOnce(bytes, 7);
  if (size >= offsetof(nnf::core::wire::ConnectMessage, listenerId) + sizeof(uint32_t)) {
    uint32_t named;
    memcpy(&named, data + offsetof(nnf::core::wire::ConnectMessage, listenerId), sizeof(named));
    nnf::test::decodeOnce(bytes, named);
  }
  return 0;
}
