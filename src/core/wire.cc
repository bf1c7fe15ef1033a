#include "core/wire.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "core/tags.h"
#include "topology/fnv1a.h"

namespace nnf::core::wire {
namespace {

// Common header checks; `Message` has magic, version and (except the handle) length.
template <typename Message>
bool checkHeader(const Message& message, size_t size, const char* what, std::string* reason) {
  if (message.magic != Message::kMagic) {
    *reason = std::string(what) + " has a foreign magic";
    return false;
  }
  if (message.version != kVersion) {
    *reason = std::string(what) + " has version " + std::to_string(message.version) +
              ", expected " + std::to_string(kVersion) +
              " (the peer runs another release of the plugin: run one on every rank)";
    return false;
  }
  return true;
}

bool checkSize(size_t size, size_t expected, const char* what, std::string* reason) {
  if (size != expected) {
    *reason = std::string(what) + " is " + std::to_string(size) + " bytes, expected " +
              std::to_string(expected);
    return false;
  }
  return true;
}

}  // namespace

uint32_t providerHash(const std::string& provider) {
  return topology::fnv1a32(provider);
}

uint32_t handleChecksum(const ListenHandle& handle) {
  ListenHandle copy = handle;
  copy.connectToken = 0;
  copy.checksum = 0;
  return topology::fnv1a32(&copy, sizeof(copy));
}

uint32_t localPid() {
  return static_cast<uint32_t>(getpid());
}

uint64_t localHostId() {
  static const uint64_t kHostId = [] {
    // The boot id is shared by every network namespace of one machine, unlike addresses.
    std::string text;
    std::ifstream bootId("/proc/sys/kernel/random/boot_id");
    if (!std::getline(bootId, text) || text.empty()) {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      text = host;
    }
    return topology::fnv1a64(text);
  }();
  return kHostId;
}

ListenHandle makeListenHandle(uint32_t listenerId, const std::string& provider, const void* address,
                              size_t addressLength, const uint8_t* const* moreRails,
                              size_t moreRailCount) {
  if (addressLength > kMaxAddressLength) {
    throw std::runtime_error("endpoint address of " + std::to_string(addressLength) +
                             " bytes does not fit the listen handle");
  }
  ListenHandle handle{};
  handle.magic = ListenHandle::kMagic;
  handle.version = kVersion;
  handle.addressLength = static_cast<uint16_t>(addressLength);
  handle.listenerId = listenerId;
  handle.providerHash = providerHash(provider);
  memcpy(handle.address, address, addressLength);
  size_t fit = addressLength > 0 ? kMaxAddressLength / addressLength : 1;
  size_t rails = std::min({fit, moreRailCount + 1, kMaxRails});
  for (size_t r = 1; r < rails; ++r)
    memcpy(handle.address + r * addressLength, moreRails[r - 1], addressLength);
  handle.rails = static_cast<uint16_t>(rails);
  handle.checksum = handleChecksum(handle);
  return handle;
}

bool decodeListenHandle(const void* data, size_t size, const std::string& provider,
                        ListenHandle* out, std::string* reason) {
  if (data == nullptr) {
    *reason = "listen handle is NULL";
    return false;
  }
  if (!checkSize(size, sizeof(ListenHandle), "listen handle", reason)) return false;
  ListenHandle handle;
  memcpy(&handle, data, sizeof(handle));
  if (!checkHeader(handle, size, "listen handle", reason)) return false;
  if (handle.checksum != handleChecksum(handle)) {
    *reason = "listen handle is corrupted (checksum mismatch)";
    return false;
  }
  if (handle.providerHash != providerHash(provider)) {
    *reason =
        "listen handle was made by another libfabric provider (this side uses " + provider + ")";
    return false;
  }
  if (handle.addressLength == 0 || handle.addressLength > kMaxAddressLength) {
    *reason = "listen handle has an address length of " + std::to_string(handle.addressLength);
    return false;
  }
  if (handle.rails == 0 || handle.rails > kMaxRails ||
      size_t{handle.rails} * handle.addressLength > kMaxAddressLength) {
    *reason = "listen handle names " + std::to_string(handle.rails) + " rails of " +
              std::to_string(handle.addressLength) + "-byte addresses";
    return false;
  }
  if (handle.listenerId > tags::kMaxCommId) {
    *reason = "listen handle has an out-of-range listener id";
    return false;
  }
  *out = handle;
  return true;
}

RailAddresses makeRailAddresses(size_t rails, const uint8_t* const* railAddresses,
                                size_t railAddressLength) {
  if (rails < 1 || rails > kMaxRails ||
      (rails > 1 && (railAddresses == nullptr || railAddressLength == 0 ||
                     railAddressLength > kMaxRailAddressLength))) {
    throw std::runtime_error("rail addresses do not fit a set-up message");
  }
  RailAddresses out{};
  out.rails = static_cast<uint16_t>(rails);
  out.railAddressLength = static_cast<uint16_t>(rails > 1 ? railAddressLength : 0);
  for (size_t r = 1; r < rails; ++r) {
    memcpy(out.railAddresses[r - 1], railAddresses[r - 1], railAddressLength);
  }
  return out;
}

namespace {
// Valid rail counts and lengths, and unused bytes zero (a message decodes to exactly one
// encoding); `what` names the message in the reason.
bool checkRailAddresses(const RailAddresses& rails, const char* what, std::string* reason) {
  if (rails.rails < 1 || rails.rails > kMaxRails ||
      (rails.rails == 1) != (rails.railAddressLength == 0) ||
      rails.railAddressLength > kMaxRailAddressLength) {
    *reason = std::string(what) + " has an invalid rail count or rail address length";
    return false;
  }
  bool padded = rails.reserved == 0;
  for (size_t r = 0; r + 1 < kMaxRails; ++r) {
    size_t used = r + 1 < rails.rails ? rails.railAddressLength : 0;
    for (size_t i = used; i < kMaxRailAddressLength; ++i) padded &= rails.railAddresses[r][i] == 0;
  }
  if (!padded) {
    *reason = std::string(what) + " has bytes set outside its fields";
    return false;
  }
  return true;
}
}  // namespace

ConnectMessage makeConnectMessage(uint32_t senderCommId, uint32_t listenerId, const void* address,
                                  size_t addressLength, uint16_t protocol, uint64_t ringAddress,
                                  uint64_t ringKey, const uint64_t* ringRailKeys,
                                  const RailAddresses& rails) {
  if (addressLength > kMaxAddressLength) throw std::runtime_error("endpoint address too long");
  ConnectMessage message{};
  message.magic = ConnectMessage::kMagic;
  message.version = kVersion;
  message.length = sizeof(ConnectMessage);
  message.senderCommId = senderCommId;
  message.listenerId = listenerId;
  message.addressLength = static_cast<uint16_t>(addressLength);
  message.protocol = protocol;
  message.pid = localPid();
  message.hostId = localHostId();
  memcpy(message.address, address, addressLength);
  message.ringAddress = ringAddress;
  message.ringKey = ringKey;
  if (ringRailKeys != nullptr) {
    memcpy(message.ringRailKeys, ringRailKeys, sizeof(message.ringRailKeys));
  }
  message.rails = rails;
  return message;
}

bool decodeConnectMessage(const void* data, size_t size, uint32_t expectedListenerId,
                          ConnectMessage* out, std::string* reason) {
  // Another version's message may have another size: its version is the reason to give.
  struct Prefix {
    uint32_t magic;
    uint16_t version;
  } prefix;
  if (size >= sizeof(prefix)) {
    memcpy(&prefix, data, sizeof(prefix));
    if (prefix.magic == ConnectMessage::kMagic && prefix.version != kVersion) {
      ConnectMessage versioned{};
      versioned.magic = prefix.magic;
      versioned.version = prefix.version;
      return checkHeader(versioned, size, "connect message", reason);
    }
  }
  if (!checkSize(size, sizeof(ConnectMessage), "connect message", reason)) return false;
  ConnectMessage message;
  memcpy(&message, data, sizeof(message));
  if (!checkHeader(message, size, "connect message", reason)) return false;
  if (message.length != sizeof(ConnectMessage)) {
    *reason = "connect message declares " + std::to_string(message.length) + " bytes";
    return false;
  }
  if (message.listenerId != expectedListenerId) {
    *reason = "connect message is for listener " + std::to_string(message.listenerId) + ", not " +
              std::to_string(expectedListenerId);
    return false;
  }
  if (message.addressLength == 0 || message.addressLength > kMaxAddressLength ||
      message.senderCommId > tags::kMaxCommId) {
    *reason = "connect message has an invalid address length or comm id";
    return false;
  }
  if (!checkRailAddresses(message.rails, "connect message", reason)) return false;
  *out = message;
  return true;
}

AcceptMessage makeAcceptMessage(uint32_t recvCommId, uint32_t senderCommId, uint32_t protocol,
                                const RailAddresses& rails) {
  AcceptMessage message{};
  message.magic = AcceptMessage::kMagic;
  message.version = kVersion;
  message.length = sizeof(AcceptMessage);
  message.recvCommId = recvCommId;
  message.senderCommId = senderCommId;
  message.pid = localPid();
  message.protocol = protocol;
  message.hostId = localHostId();
  message.rails = rails;
  return message;
}

bool decodeAcceptMessage(const void* data, size_t size, uint32_t expectedSenderCommId,
                         AcceptMessage* out, std::string* reason) {
  if (!checkSize(size, sizeof(AcceptMessage), "accept message", reason)) return false;
  AcceptMessage message;
  memcpy(&message, data, sizeof(message));
  if (!checkHeader(message, size, "accept message", reason)) return false;
  if (message.length != sizeof(AcceptMessage) || message.senderCommId != expectedSenderCommId ||
      message.recvCommId > tags::kMaxCommId) {
    *reason = "accept message does not answer this connection";
    return false;
  }
  if (!checkRailAddresses(message.rails, "accept message", reason)) return false;
  *out = message;
  return true;
}

ControlHeader makeControlHeader(uint32_t commId, ControlKind kind, size_t payloadLength) {
  ControlHeader header{};
  header.magic = ControlHeader::kMagic;
  header.commId = commId;
  header.kind = static_cast<uint32_t>(kind);
  header.length = static_cast<uint32_t>(payloadLength);
  return header;
}

bool decodeControlHeader(const void* data, size_t size, ControlHeader* out, std::string* reason) {
  if (size < sizeof(ControlHeader)) {
    *reason = "a control message of " + std::to_string(size) + " bytes is shorter than its header";
    return false;
  }
  ControlHeader header;
  memcpy(&header, data, sizeof(header));
  if (header.magic != ControlHeader::kMagic) {
    *reason = "bad control message magic";
    return false;
  }
  if (header.length != size - sizeof(ControlHeader)) {
    *reason = "control message length " + std::to_string(header.length) + " but " +
              std::to_string(size - sizeof(ControlHeader)) + " bytes of payload arrived";
    return false;
  }
  *out = header;
  return true;
}

}  // namespace nnf::core::wire
