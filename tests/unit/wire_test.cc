#include "core/wire.h"
#include "core/control_channel.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tags.h"

namespace nnf::core {
namespace {

const uint8_t kAddress[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

// A handle edited after encoding, with its checksum made valid again: only such a handle
// reaches the checks behind the checksum (provider, address length, listener id).
wire::ListenHandle resealed(wire::ListenHandle handle) {
  handle.checksum = wire::handleChecksum(handle);
  return handle;
}

// gtest's failure text for `reason` not naming `expected`: what the decoder said instead.
::testing::AssertionResult names(const std::string& reason, const std::string& expected) {
  if (reason.find(expected) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << (reason.empty() ? "accepted" : "rejected as \"" + reason + "\"")
         << ", expected a rejection naming \"" << expected << "\"";
}

// The decoder's verdict on `handle` as a listen handle of shm: "" when accepted, else the reason.
std::string rejection(const wire::ListenHandle& handle) {
  wire::ListenHandle decoded;
  std::string reason;
  if (wire::decodeListenHandle(&handle, sizeof(handle), "shm", &decoded, &reason)) return "";
  EXPECT_FALSE(reason.empty()) << "rejected without a reason";
  return reason;
}

TEST(ListenHandle, RoundTrips) {
  wire::ListenHandle handle = wire::makeListenHandle(42, "shm", kAddress, sizeof(kAddress));
  wire::ListenHandle decoded;
  std::string reason;
  ASSERT_TRUE(wire::decodeListenHandle(&handle, sizeof(handle), "shm", &decoded, &reason))
      << reason;
  EXPECT_EQ(decoded.listenerId, 42u);
  EXPECT_EQ(decoded.addressLength, sizeof(kAddress));
  EXPECT_EQ(memcmp(decoded.address, kAddress, sizeof(kAddress)), 0);
  EXPECT_EQ(decoded.connectToken, 0u);
}

// The listener's rails beyond the leader, as many as fit the handle's 96 address bytes: a rank
// whose path to the leader is down connects over one of them (issue 27).
TEST(ListenHandle, CarriesTheListenersRailsThatFit) {
  struct Case {
    size_t length, rails, kept;
  };
  for (Case c : {Case{32, 4, 3}, Case{16, 4, 4}, Case{48, 2, 2}, Case{60, 2, 1}, Case{32, 1, 1}}) {
    SCOPED_TRACE(std::to_string(c.rails) + " rails of " + std::to_string(c.length) + " bytes");
    std::vector<std::vector<uint8_t>> addresses;
    for (size_t r = 0; r < c.rails; ++r) addresses.emplace_back(c.length, uint8_t(0x10 * r + 1));
    std::vector<const uint8_t*> more;
    for (size_t r = 1; r < c.rails; ++r) more.push_back(addresses[r].data());
    wire::ListenHandle handle =
        wire::makeListenHandle(5, "shm", addresses[0].data(), c.length, more.data(), more.size());
    wire::ListenHandle decoded;
    std::string reason;
    ASSERT_TRUE(wire::decodeListenHandle(&handle, sizeof(handle), "shm", &decoded, &reason))
        << reason;
    ASSERT_EQ(decoded.rails, c.kept);
    for (size_t r = 0; r < c.kept; ++r) {
      EXPECT_EQ(memcmp(decoded.railAddress(r), addresses[r].data(), c.length), 0) << "rail " << r;
    }
  }
}

TEST(ListenHandle, RejectsMoreRailsThanItsAddressesHoldBehindAValidChecksum) {
  const uint8_t efaLike[32] = {1};  // three fit in 96 bytes
  const wire::ListenHandle handle = wire::makeListenHandle(1, "shm", efaLike, sizeof(efaLike));
  for (uint16_t rails : {0, 4, 5, 0xffff}) {
    wire::ListenHandle bad = handle;
    bad.rails = rails;
    EXPECT_TRUE(names(rejection(resealed(bad)), "names " + std::to_string(rails) + " rails"))
        << rails;
  }
  wire::ListenHandle three = handle;
  three.rails = 3;
  EXPECT_EQ(rejection(resealed(three)), "");
}

TEST(ListenHandle, FitsNcclHandle) {
  EXPECT_LE(sizeof(wire::ListenHandle), 128u);
}

TEST(ListenHandle, RejectsForeignProvider) {
  wire::ListenHandle handle = wire::makeListenHandle(1, "tcp;ofi_rxm", kAddress, sizeof(kAddress));
  wire::ListenHandle decoded;
  std::string reason;
  EXPECT_FALSE(wire::decodeListenHandle(&handle, sizeof(handle), "shm", &decoded, &reason));
  EXPECT_TRUE(names(reason, "another libfabric provider"));
}

TEST(ListenHandle, RejectsZerosGarbageAndTruncation) {
  wire::ListenHandle decoded;
  std::string reason;
  uint8_t zeros[128] = {};
  EXPECT_FALSE(wire::decodeListenHandle(zeros, sizeof(zeros), "shm", &decoded, &reason));
  EXPECT_TRUE(names(reason, "foreign magic"));

  wire::ListenHandle handle = wire::makeListenHandle(1, "shm", kAddress, sizeof(kAddress));
  EXPECT_FALSE(wire::decodeListenHandle(&handle, 64, "shm", &decoded, &reason));
  EXPECT_TRUE(names(reason, "is 64 bytes, expected 128"));
  EXPECT_FALSE(wire::decodeListenHandle(nullptr, sizeof(handle), "shm", &decoded, &reason));
  EXPECT_TRUE(names(reason, "NULL"));

  wire::ListenHandle badVersion = handle;
  badVersion.version = 99;
  EXPECT_TRUE(names(rejection(resealed(badVersion)), "version 99"));

  std::mt19937 random(7);
  for (int i = 0; i < 1000; ++i) {
    uint8_t noise[128];
    for (uint8_t& byte : noise) byte = static_cast<uint8_t>(random());
    EXPECT_FALSE(wire::decodeListenHandle(noise, sizeof(noise), "shm", &decoded, &reason));
  }
}

TEST(ListenHandle, ChecksumCatchesAnyChangedByteButTheConnectToken) {
  const wire::ListenHandle handle = wire::makeListenHandle(1, "shm", kAddress, sizeof(kAddress));
  const size_t tokenAt = offsetof(wire::ListenHandle, connectToken);
  const size_t checksumAt = offsetof(wire::ListenHandle, checksum);
  // Past magic and version, whose own checks come first and name them instead.
  for (size_t at = offsetof(wire::ListenHandle, addressLength); at < sizeof(handle); ++at) {
    if (at >= checksumAt && at < checksumAt + sizeof(handle.checksum)) continue;
    wire::ListenHandle changed = handle;
    reinterpret_cast<uint8_t*>(&changed)[at] ^= 0x40;
    std::string reason = rejection(changed);
    if (at >= tokenAt && at < tokenAt + sizeof(handle.connectToken)) {
      // connect() writes its token into NCCL's copy of the handle: the copy stays valid.
      EXPECT_EQ(reason, "") << "byte " << at;
    } else {
      EXPECT_TRUE(names(reason, "checksum mismatch")) << "byte " << at;
    }
  }
}

TEST(ListenHandle, RejectsAddressLengthOutsideOneToMaxBehindAValidChecksum) {
  const wire::ListenHandle handle = wire::makeListenHandle(1, "shm", kAddress, sizeof(kAddress));
  for (uint16_t length : {0, 97, 128, 200, 0xffff}) {
    wire::ListenHandle bad = handle;
    bad.addressLength = length;
    EXPECT_TRUE(names(rejection(resealed(bad)), "address length of " + std::to_string(length)))
        << length;
  }
  for (uint16_t length : {1, 96}) {
    wire::ListenHandle good = handle;
    good.addressLength = length;
    EXPECT_EQ(rejection(resealed(good)), "") << length;
  }
}

TEST(ListenHandle, RejectsOutOfRangeListenerIdBehindAValidChecksum) {
  const wire::ListenHandle handle = wire::makeListenHandle(1, "shm", kAddress, sizeof(kAddress));
  for (uint32_t id : {tags::kMaxCommId + 1, tags::kMaxCommId << 1, 0xffffffffu}) {
    wire::ListenHandle bad = handle;
    bad.listenerId = id;
    EXPECT_TRUE(names(rejection(resealed(bad)), "out-of-range listener id")) << id;
  }
  wire::ListenHandle highest = handle;
  highest.listenerId = tags::kMaxCommId;
  EXPECT_EQ(rejection(resealed(highest)), "");
}

TEST(ListenHandle, RefusesOversizedAddress) {
  uint8_t big[wire::kMaxAddressLength + 1] = {};
  EXPECT_THROW(wire::makeListenHandle(1, "shm", big, sizeof(big)), std::runtime_error);
}

TEST(ConnectMessage, RoundTripsAndChecksListener) {
  wire::ConnectMessage message = wire::makeConnectMessage(9, 3, kAddress, sizeof(kAddress));
  wire::ConnectMessage decoded;
  std::string reason;
  ASSERT_TRUE(wire::decodeConnectMessage(&message, sizeof(message), 3, &decoded, &reason));
  EXPECT_EQ(decoded.senderCommId, 9u);
  EXPECT_EQ(decoded.listenerId, 3u);
  EXPECT_EQ(decoded.addressLength, sizeof(kAddress));
  EXPECT_EQ(memcmp(decoded.address, kAddress, sizeof(kAddress)), 0);
  EXPECT_EQ(decoded.pid, wire::localPid());
  EXPECT_EQ(decoded.hostId, wire::localHostId());
  EXPECT_FALSE(wire::decodeConnectMessage(&message, sizeof(message), 4, &decoded, &reason));
  EXPECT_TRUE(names(reason, "listener 3, not 4"));
  EXPECT_FALSE(wire::decodeConnectMessage(&message, sizeof(message) - 1, 3, &decoded, &reason));
  EXPECT_TRUE(names(reason, "is 319 bytes, expected 320"));
}

// Version 4 carries the rdma ring's key on every rail, and is 24 bytes longer than version 3: a
// peer of version 3 is refused for its version (not for its size), naming both (ours is 5 now:
// the rdma protocol's rail recovery).
TEST(ConnectMessage, CarriesTheRingKeyOfEveryRailAndRefusesVersion3ForItsVersion) {
  const uint64_t railKeys[wire::kMaxRails - 1] = {0x11, 0x22, 0x33};
  wire::ConnectMessage message =
      wire::makeConnectMessage(9, 3, kAddress, sizeof(kAddress), 2, 0x1000, 0x10, railKeys);
  wire::ConnectMessage decoded;
  std::string reason;
  ASSERT_TRUE(wire::decodeConnectMessage(&message, sizeof(message), 3, &decoded, &reason));
  EXPECT_EQ(decoded.ringKey, 0x10u);
  for (size_t r = 0; r < wire::kMaxRails - 1; ++r) EXPECT_EQ(decoded.ringRailKeys[r], railKeys[r]);
  wire::ConnectMessage old = message;
  old.version = 3;
  old.length = 144;
  EXPECT_FALSE(wire::decodeConnectMessage(&old, 144, 3, &decoded, &reason));
  EXPECT_TRUE(names(reason, "version 3, expected " + std::to_string(wire::kVersion))) << reason;
  EXPECT_TRUE(names(reason, "another release of the plugin")) << reason;
}

// Each field the decoder checks, broken alone in an otherwise valid message: rejected, for the
// reason that names it (the message has no checksum; every check is reachable).
TEST(ConnectMessage, RejectsEachBadFieldForItsOwnReason) {
  const wire::ConnectMessage message = wire::makeConnectMessage(9, 3, kAddress, sizeof(kAddress));
  auto rejection = [](const wire::ConnectMessage& bad) -> std::string {
    wire::ConnectMessage decoded;
    std::string reason;
    if (wire::decodeConnectMessage(&bad, sizeof(bad), 3, &decoded, &reason)) return "";
    return reason;
  };
  wire::ConnectMessage bad = message;
  bad.magic ^= 1;
  EXPECT_TRUE(names(rejection(bad), "foreign magic"));
  bad = message;
  bad.version = 1;  // the version before the protocol ids and the rdma ring
  EXPECT_TRUE(names(rejection(bad), "version 1"));
  bad = message;
  bad.length = 4000;
  EXPECT_TRUE(names(rejection(bad), "declares 4000 bytes"));
  for (uint16_t length : {0, 97, 0xffff}) {
    bad = message;
    bad.addressLength = length;
    EXPECT_TRUE(names(rejection(bad), "invalid address length")) << length;
  }
  bad = message;
  bad.senderCommId = tags::kMaxCommId + 1;
  EXPECT_TRUE(names(rejection(bad), "comm id"));
  // The limits themselves are valid.
  bad = message;
  bad.senderCommId = tags::kMaxCommId;
  bad.addressLength = wire::kMaxAddressLength;
  EXPECT_EQ(rejection(bad), "");
}

TEST(AcceptMessage, RoundTripsAndChecksSender) {
  wire::AcceptMessage message = wire::makeAcceptMessage(11, 5);
  wire::AcceptMessage decoded;
  std::string reason;
  ASSERT_TRUE(wire::decodeAcceptMessage(&message, sizeof(message), 5, &decoded, &reason));
  EXPECT_EQ(decoded.recvCommId, 11u);
  EXPECT_EQ(decoded.senderCommId, 5u);
  EXPECT_EQ(decoded.pid, wire::localPid());
  EXPECT_EQ(decoded.hostId, wire::localHostId());
  EXPECT_FALSE(wire::decodeAcceptMessage(&message, sizeof(message), 6, &decoded, &reason));
  EXPECT_TRUE(names(reason, "does not answer this connection"));
  EXPECT_FALSE(wire::decodeAcceptMessage(&message, 3, 5, &decoded, &reason));
  EXPECT_TRUE(names(reason, "is 3 bytes, expected 184"));
  EXPECT_EQ(decoded.rails.rails, 1u);
  EXPECT_EQ(decoded.rails.railAddressLength, 0u);
}

TEST(AcceptMessage, RejectsEachBadFieldForItsOwnReason) {
  const wire::AcceptMessage message = wire::makeAcceptMessage(11, 5);
  auto rejection = [](const wire::AcceptMessage& bad) -> std::string {
    wire::AcceptMessage decoded;
    std::string reason;
    if (wire::decodeAcceptMessage(&bad, sizeof(bad), 5, &decoded, &reason)) return "";
    return reason;
  };
  wire::AcceptMessage bad = message;
  bad.magic ^= 1;
  EXPECT_TRUE(names(rejection(bad), "foreign magic"));
  bad = message;
  bad.version = 0;
  EXPECT_TRUE(names(rejection(bad), "version 0"));
  bad = message;
  bad.length = 33;
  EXPECT_TRUE(names(rejection(bad), "does not answer"));
  bad = message;
  bad.rails.rails = 0;
  EXPECT_TRUE(names(rejection(bad), "invalid rail count"));
  bad = message;
  bad.rails.rails = wire::kMaxRails + 1;
  bad.rails.railAddressLength = 16;
  EXPECT_TRUE(names(rejection(bad), "invalid rail count"));
  bad = message;
  bad.rails.rails = 2;  // a second rail without its address
  EXPECT_TRUE(names(rejection(bad), "invalid rail count"));
  bad = message;
  bad.rails.railAddressLength = 16;  // an address with one rail
  EXPECT_TRUE(names(rejection(bad), "invalid rail count"));
  bad = message;
  bad.rails.rails = 2;
  bad.rails.railAddressLength = wire::kMaxRailAddressLength + 1;
  EXPECT_TRUE(names(rejection(bad), "rail address length"));
  bad.rails.railAddressLength = wire::kMaxRailAddressLength;
  EXPECT_EQ(rejection(bad), "");
  bad.rails.rails = 1;
  bad.rails.railAddressLength = 0;
  bad.rails.railAddresses[0][0] = 1;  // an address byte for a rail it does not have
  EXPECT_TRUE(names(rejection(bad), "bytes set outside its fields"));
  bad = message;
  bad.rails.reserved = 1;
  EXPECT_TRUE(names(rejection(bad), "bytes set outside its fields"));
  bad = message;
  bad.recvCommId = tags::kMaxCommId + 1;
  EXPECT_TRUE(names(rejection(bad), "does not answer"));
  bad = message;
  bad.recvCommId = tags::kMaxCommId;
  EXPECT_EQ(rejection(bad), "");
}

TEST(AcceptMessage, CarriesTheAddressesOfEveryRailBeyondTheLeader) {
  uint8_t first[20], second[20], third[20];
  for (int i = 0; i < 20; ++i) {
    first[i] = static_cast<uint8_t>(i);
    second[i] = static_cast<uint8_t>(100 + i);
    third[i] = static_cast<uint8_t>(200 + i);
  }
  const uint8_t* addresses[] = {first, second, third};
  wire::AcceptMessage message =
      wire::makeAcceptMessage(11, 5, 2, wire::makeRailAddresses(4, addresses, sizeof(first)));
  wire::AcceptMessage decoded;
  std::string reason;
  ASSERT_TRUE(wire::decodeAcceptMessage(&message, sizeof(message), 5, &decoded, &reason)) << reason;
  EXPECT_EQ(decoded.rails.rails, 4u);
  EXPECT_EQ(decoded.rails.railAddressLength, 20u);
  EXPECT_EQ(memcmp(decoded.rails.railAddresses[0], first, 20), 0);
  EXPECT_EQ(memcmp(decoded.rails.railAddresses[1], second, 20), 0);
  EXPECT_EQ(memcmp(decoded.rails.railAddresses[2], third, 20), 0);
  EXPECT_THROW(wire::makeRailAddresses(wire::kMaxRails + 1, addresses, 20), std::runtime_error);
  EXPECT_THROW(wire::makeRailAddresses(2, addresses, wire::kMaxRailAddressLength + 1),
               std::runtime_error);
  static_assert(sizeof(wire::AcceptMessage) <= core::ControlChannel::kMaxPayload,
                "fits a control message");
}

TEST(ConnectMessage, CarriesTheSendersRailsBeyondTheLeader) {
  uint8_t first[32], second[32];
  for (int i = 0; i < 32; ++i) {
    first[i] = static_cast<uint8_t>(i + 1);
    second[i] = static_cast<uint8_t>(100 + i);
  }
  const uint8_t* addresses[] = {first, second};
  wire::ConnectMessage message =
      wire::makeConnectMessage(9, 3, kAddress, sizeof(kAddress), 2, 0x1000, 0x10, nullptr,
                               wire::makeRailAddresses(3, addresses, sizeof(first)));
  wire::ConnectMessage decoded;
  std::string reason;
  ASSERT_TRUE(wire::decodeConnectMessage(&message, sizeof(message), 3, &decoded, &reason))
      << reason;
  EXPECT_EQ(decoded.rails.rails, 3u);
  EXPECT_EQ(decoded.rails.railAddressLength, 32u);
  EXPECT_EQ(memcmp(decoded.rails.railAddresses[0], first, 32), 0);
  EXPECT_EQ(memcmp(decoded.rails.railAddresses[1], second, 32), 0);
  // The rails are checked as an accept message's are.
  wire::ConnectMessage bad = message;
  bad.rails.railAddresses[2][0] = 1;  // a byte for a rail it does not have
  EXPECT_FALSE(wire::decodeConnectMessage(&bad, sizeof(bad), 3, &decoded, &reason));
  EXPECT_TRUE(names(reason, "connect message has bytes set outside its fields"));
  bad = message;
  bad.rails.rails = 0;
  EXPECT_FALSE(wire::decodeConnectMessage(&bad, sizeof(bad), 3, &decoded, &reason));
  EXPECT_TRUE(names(reason, "connect message has an invalid rail count"));
  static_assert(sizeof(wire::ConnectMessage) <= core::ControlChannel::kMaxPayload,
                "fits a control message");
}

TEST(Tags, FieldsDoNotOverlap) {
  uint64_t tag = tags::data(tags::kMaxCommId, tags::kSeqMask, -1);
  EXPECT_EQ(tag >> 63, 0u) << "bit 63 stays clear";
  EXPECT_EQ(tags::commId(tag), tags::kMaxCommId);
  EXPECT_EQ(tags::seq(tag), tags::kSeqMask);
  EXPECT_EQ(tags::ncclTag(tag), -1);

  uint64_t other = tags::data(5, 17, 123456);
  EXPECT_EQ(tags::commId(other), 5u);
  EXPECT_EQ(tags::seq(other), 17u);
  EXPECT_EQ(tags::ncclTag(other), 123456);
  // Sequence numbers wrap instead of spilling into the comm id.
  EXPECT_EQ(tags::data(5, tags::kSeqMask + 1, 0), tags::data(5, 0, 0));
}

TEST(ControlHeader, RoundTripsAndRejectsWhatDidNotArriveWhole) {
  uint8_t buffer[64] = {};
  wire::ControlHeader header = wire::makeControlHeader(77, wire::ControlKind::kAccept, 8);
  memcpy(buffer, &header, sizeof(header));
  wire::ControlHeader decoded;
  std::string reason;
  ASSERT_TRUE(wire::decodeControlHeader(buffer, sizeof(header) + 8, &decoded, &reason)) << reason;
  EXPECT_EQ(decoded.commId, 77u);
  EXPECT_EQ(decoded.kind, static_cast<uint32_t>(wire::ControlKind::kAccept));
  EXPECT_FALSE(wire::decodeControlHeader(buffer, sizeof(header) + 7, &decoded, &reason));
  EXPECT_FALSE(wire::decodeControlHeader(buffer, sizeof(header) - 1, &decoded, &reason));
  buffer[0] ^= 1;
  EXPECT_FALSE(wire::decodeControlHeader(buffer, sizeof(header) + 8, &decoded, &reason));
}

}  // namespace
}  // namespace nnf::core
