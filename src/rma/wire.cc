#include "rma/wire.h"

#include <cstring>

#include "core/wire.h"

namespace nnf::rma {
namespace {

template <typename Message>
bool decodeMessage(const uint8_t* data, size_t length, Message* out, const char* what,
                   std::string* reason) {
  if (length != sizeof(Message)) {
    *reason = std::string(what) + " of " + std::to_string(length) + " bytes, expected " +
              std::to_string(sizeof(Message));
    return false;
  }
  memcpy(out, data, sizeof(Message));
  if (out->magic != Message::kMagic) {
    *reason = std::string(what) + " with a foreign magic";
    return false;
  }
  if (out->version != kVersion) {
    *reason = std::string(what) + " of version " + std::to_string(out->version) + ", expected " +
              std::to_string(kVersion);
    return false;
  }
  return true;
}

}  // namespace

uint32_t handleChecksum(const ListenHandle& handle) {
  ListenHandle copy = handle;
  copy.checksum = 0;
  const auto* bytes = reinterpret_cast<const uint8_t*>(&copy);
  uint32_t hash = 2166136261u;  // FNV-1a
  for (size_t i = 0; i < sizeof(copy); ++i) hash = (hash ^ bytes[i]) * 16777619u;
  return hash;
}

ListenHandle makeListenHandle(uint32_t listenerId, uint64_t nonce, const std::string& provider,
                              const void* address, size_t length) {
  ListenHandle handle{};
  handle.magic = ListenHandle::kMagic;
  handle.version = kVersion;
  handle.addressLength = static_cast<uint16_t>(length);
  handle.listenerId = listenerId;
  handle.providerHash = core::wire::providerHash(provider);
  handle.nonce = nonce;
  memcpy(handle.address, address, length < sizeof(handle.address) ? length : 0);
  handle.checksum = handleChecksum(handle);
  return handle;
}

bool decodeListenHandle(const void* data, const std::string& provider, ListenHandle* out,
                        std::string* reason) {
  memcpy(out, data, sizeof(*out));
  if (out->magic != ListenHandle::kMagic) {
    *reason = "not a handle of this plugin's RMA listen (foreign magic)";
    return false;
  }
  if (out->version != kVersion) {
    *reason = "an RMA handle of version " + std::to_string(out->version);
    return false;
  }
  if (out->checksum != handleChecksum(*out)) {
    *reason = "a damaged RMA handle (checksum mismatch)";
    return false;
  }
  if (out->providerHash != core::wire::providerHash(provider)) {
    *reason = "an RMA handle of another provider than " + provider;
    return false;
  }
  if (out->addressLength == 0 || out->addressLength > ListenHandle::kMaxAddress) {
    *reason = "an RMA handle with an address of " + std::to_string(out->addressLength) + " bytes";
    return false;
  }
  return true;
}

bool messageKind(const uint8_t* data, size_t length, MessageKind* out) {
  // Every message starts with magic (4), version (2), a 16-bit field and its 32-bit kind.
  if (length < 12) return false;
  uint32_t kind = 0;
  memcpy(&kind, data + 8, sizeof(kind));
  if (kind != static_cast<uint32_t>(MessageKind::kJoin) &&
      kind != static_cast<uint32_t>(MessageKind::kWindow))
    return false;
  *out = static_cast<MessageKind>(kind);
  return true;
}

bool decodeJoin(const uint8_t* data, size_t length, JoinMessage* out, std::string* reason) {
  if (!decodeMessage(data, length, out, "an RMA join message", reason)) return false;
  if (out->rails < 1 || out->rails > memory::kMaxRails ||
      (out->rails > 1 && (out->railAddressLength == 0 ||
                          out->railAddressLength > kMaxRailAddress))) {
    *reason = "an RMA join message with " + std::to_string(out->rails) + " rails of " +
              std::to_string(out->railAddressLength) + "-byte addresses";
    return false;
  }
  if (out->nranks == 0 || out->rank >= out->nranks) {
    *reason = "an RMA join message from rank " + std::to_string(out->rank) + " of " +
              std::to_string(out->nranks);
    return false;
  }
  return true;
}

bool decodeWindow(const uint8_t* data, size_t length, WindowMessage* out, std::string* reason) {
  return decodeMessage(data, length, out, "an RMA window record", reason);
}

}  // namespace nnf::rma
