// What the connect- and accept-message fuzzers share: both messages arrive as bytes from anyone
// who can reach the endpoint, name the id they are meant for, and must decode only as the very
// message that arrived.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/wire.h"
#include "fuzz_common.h"

namespace nnf::test {

// Decodes `bytes` with decode(data, size, expectedId, out, &reason). A refusal must come with a
// reason; what decodes must be the message as it arrived, whole, with its magic, version and
// length. True when it decoded (*out then holds it).
template <typename Message, typename Decode>
bool decodesAsArrived(const std::vector<uint8_t>& bytes, uint32_t expectedId, Decode&& decode,
                      Message* out) {
  memset(out, 0xEE, sizeof(*out));
  std::string reason;
  bool ok = decode(bytes.empty() ? nullptr : bytes.data(), bytes.size(), expectedId, out, &reason);
  if (!ok) {
    NNF_FUZZ_CHECK(!reason.empty());
    return false;
  }
  NNF_FUZZ_CHECK(bytes.size() == sizeof(Message));
  // The decoder hands over the message as it arrived, and only one that keeps every rule.
  NNF_FUZZ_CHECK(memcmp(out, bytes.data(), sizeof(*out)) == 0);
  NNF_FUZZ_CHECK(out->magic == Message::kMagic);
  NNF_FUZZ_CHECK(out->version == core::wire::kVersion);
  NNF_FUZZ_CHECK(out->length == sizeof(Message));
  return true;
}

// The message in `bytes` (a whole one) as this process's encoder writes it: the pid and host id
// are taken from the process, not the message.
template <typename Message>
Message fromThisProcess(const std::vector<uint8_t>& bytes) {
  Message message;
  memcpy(&message, bytes.data(), sizeof(message));
  message.pid = core::wire::localPid();
  message.hostId = core::wire::localHostId();
  return message;
}

// Runs decodeOnce(bytes, id) on an exact-size copy of the input (ASan flags any read past what
// arrived), against a fixed id and against the id the message names at `idOffset`, so that the
// fuzzer reaches the checks behind the id.
template <typename DecodeOnce>
void decodeForFixedAndNamedId(const uint8_t* data, size_t size, size_t idOffset,
                              DecodeOnce&& decodeOnce) {
  std::vector<uint8_t> bytes(data, data + size);
  decodeOnce(bytes, 7);
  if (size >= idOffset + sizeof(uint32_t)) {
    uint32_t named;
    memcpy(&named, data + idOffset, sizeof(named));
    decodeOnce(bytes, named);
  }
}

}  // namespace nnf::test
