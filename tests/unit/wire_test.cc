#include "core/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/tags.h"

namespace nnf::core {
namespace {

const uint8_t kAddress[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

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

TEST(ListenHandle, FitsNcclHandle) {
  EXPECT_LE(sizeof(wire::ListenHandle), 128u);
}

TEST(ListenHandle, RejectsForeignProvider) {
  wire::ListenHandle handle = wire::makeListenHandle(1, "tcp;ofi_rxm", kAddress, sizeof(kAddress));
  wire::ListenHandle decoded;
  std::string reason;
  EXPECT_FALSE(wire::decodeListenHandle(&handle, sizeof(handle), "shm", &decoded, &reason));
  EXPECT_NE(reason.find("another libfabric provider"), std::string::npos) << reason;
}

TEST(ListenHandle, RejectsZerosGarbageAndTruncation) {
  wire::ListenHandle decoded;
  std::string reason;
  uint8_t zeros[128] = {};
  EXPECT_FALSE(wire::decodeListenHandle(zeros, sizeof(zeros), "shm", &decoded, &reason));
  EXPECT_NE(reason.find("magic"), std::string::npos);

  wire::ListenHandle handle = wire::makeListenHandle(1, "shm", kAddress, sizeof(kAddress));
  EXPECT_FALSE(wire::decodeListenHandle(&handle, 64, "shm", &decoded, &reason));
  EXPECT_FALSE(wire::decodeListenHandle(nullptr, sizeof(handle), "shm", &decoded, &reason));

  wire::ListenHandle badLength = handle;
  badLength.addressLength = 200;
  EXPECT_FALSE(wire::decodeListenHandle(&badLength, sizeof(badLength), "shm", &decoded, &reason));
  wire::ListenHandle badVersion = handle;
  badVersion.version = 99;
  EXPECT_FALSE(wire::decodeListenHandle(&badVersion, sizeof(badVersion), "shm", &decoded, &reason));
  EXPECT_NE(reason.find("version 99"), std::string::npos);
  wire::ListenHandle badId = handle;
  badId.listenerId = tags::kMaxCommId + 1;
  EXPECT_FALSE(wire::decodeListenHandle(&badId, sizeof(badId), "shm", &decoded, &reason));

  std::mt19937 random(7);
  for (int i = 0; i < 1000; ++i) {
    uint8_t noise[128];
    for (uint8_t& byte : noise) byte = static_cast<uint8_t>(random());
    EXPECT_FALSE(wire::decodeListenHandle(noise, sizeof(noise), "shm", &decoded, &reason));
  }
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
  EXPECT_FALSE(wire::decodeConnectMessage(&message, sizeof(message), 4, &decoded, &reason));
  EXPECT_NE(reason.find("listener 3"), std::string::npos) << reason;
  EXPECT_FALSE(wire::decodeConnectMessage(&message, sizeof(message) - 1, 3, &decoded, &reason));
  wire::ConnectMessage lying = message;
  lying.length = 4000;
  EXPECT_FALSE(wire::decodeConnectMessage(&lying, sizeof(lying), 3, &decoded, &reason));
  wire::ConnectMessage noAddress = message;
  noAddress.addressLength = 0;
  EXPECT_FALSE(wire::decodeConnectMessage(&noAddress, sizeof(noAddress), 3, &decoded, &reason));
}

TEST(AcceptMessage, RoundTripsAndChecksSender) {
  wire::AcceptMessage message = wire::makeAcceptMessage(11, 5);
  wire::AcceptMessage decoded;
  std::string reason;
  ASSERT_TRUE(wire::decodeAcceptMessage(&message, sizeof(message), 5, &decoded, &reason));
  EXPECT_EQ(decoded.recvCommId, 11u);
  EXPECT_FALSE(wire::decodeAcceptMessage(&message, sizeof(message), 6, &decoded, &reason));
  EXPECT_FALSE(wire::decodeAcceptMessage(&message, 3, 5, &decoded, &reason));
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
