// Everything the plugin puts on the wire or into NCCL's handle, with strict decoders: each
// message carries a magic, a version and its length, and nothing is read past what arrived.
// Decoders return nullptr-free results: false plus a reason the caller logs once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "memory/region.h"

namespace nnf::core::wire {

// 2: protocol ids and the rdma ring; 3: rail addresses; 4: the rdma ring's key on every rail
// (and the rdma eager grant's, protocol/rdma_eager.h); 5: the protocols' own control messages
// (kProtocol: the rdma protocol's rail recovery) and the rdma arena slot's recovery area; 6: the
// rdma eager write's immediate carries its generation in the bounce entry; 7: the connect message
// carries the sender's rails (the receiver writes and answers on any of them when its leader
// fails) and the rdma descriptor group its slot's generation; 8: the listen handle carries the
// listener's rails beyond the leader where they fit (a comm connects over another rail while the
// leader is down); 9: the rdma rail recovery asks about a void that failed on a broken rail (the
// receiver's slot waited for it until the comm closed); 10: the rdma rail recovery's answer names
// the rails the buffer ignores (two shares of a striped message on one failed rail both go
// again, on a rail the receiver still counts). Both ends check it: a peer of another
// version is refused with a reason naming both versions.
constexpr uint16_t kVersion = 10;
constexpr size_t kMaxAddressLength = 96;
// The rails of a device beyond its leader, as an accept message carries them (EFA addresses
// are 32 bytes, IPv6 sockaddrs 28).
constexpr size_t kMaxRails = memory::kMaxRails;
constexpr size_t kMaxRailAddressLength = 48;

// Every control message (untagged, through the device's control channel) starts with this
// header: it names the comm the message is for, on the receiving device.
// kClosed: the receive comm closed (rdma: the sender's waiting sends can never be matched);
// kClosedAck: the sender answers once none of its writes toward that comm is in flight.
enum class ControlKind : uint32_t {
  kConnect = 1,
  kAccept = 2,
  kPing = 3,
  kClosed = 4,
  kClosedAck = 5,
  kRma = 6,      // the one-sided RMA layer's set-up messages (src/rma/wire.h says which)
  kProtocol = 7  // a data protocol's own messages between connected comms (rdma: rail recovery)
};
struct ControlHeader {
  static constexpr uint32_t kMagic = 0x4843464eu;  // "NFCH"
  uint32_t magic;
  uint32_t commId;
  uint32_t kind;
  uint32_t length;  // bytes of payload after the header
};
static_assert(sizeof(ControlHeader) == 16);

ControlHeader makeControlHeader(uint32_t commId, ControlKind kind, size_t payloadLength);
// Validates the header of `size` received bytes; the payload follows it.
bool decodeControlHeader(const void* data, size_t size, ControlHeader* out, std::string* reason);

// The 128-byte listen handle NCCL carries from the listener to the connecting rank.
struct ListenHandle {
  static constexpr uint32_t kMagic = 0x4846464eu;  // "NFFH"
  uint32_t magic;
  uint16_t version;
  uint16_t addressLength;
  uint32_t listenerId;
  uint32_t providerHash;  // rejects a handle made by another provider
  // Written by connect() into NCCL's copy of the handle so that the retried call finds the
  // connection it started; 0 in a fresh handle.
  uint64_t connectToken;
  uint32_t checksum;  // over every byte but connectToken: a cut or garbled handle never
                      // reaches the address vector
  // The listener's rails 0 .. rails-1, each addressLength bytes in `address`: as many as fit
  // (three EFA addresses of 32 bytes), so that a connecting rank whose path to the leader is
  // down reaches the listener over another rail.
  uint16_t rails;
  uint16_t reserved;
  uint8_t address[kMaxAddressLength];
  const uint8_t* railAddress(size_t rail) const { return address + rail * addressLength; }
};
static_assert(sizeof(ListenHandle) == 128);

uint32_t handleChecksum(const ListenHandle& handle);

// The rails of a device beyond its leader, as set-up messages carry them (rail 0, the leader, is
// the address the message came from or the listen handle's).
struct RailAddresses {
  uint16_t rails;              // 1..kMaxRails
  uint16_t railAddressLength;  // of each address below; 0 with one rail
  uint32_t reserved;
  uint8_t railAddresses[kMaxRails - 1][kMaxRailAddressLength];
};
static_assert(sizeof(RailAddresses) == 152);

// Sender → listener: "I am send comm `senderCommId` at `address`, and my rails 1.. are at
// these addresses".
struct ConnectMessage {
  static constexpr uint32_t kMagic = 0x4d43464eu;  // "NFCM"
  uint32_t magic;
  uint16_t version;
  uint16_t length;
  uint32_t senderCommId;
  uint32_t listenerId;
  uint16_t addressLength;
  uint16_t protocol;  // protocol::ProtocolId: both ends must move data the same way
  uint32_t pid;       // with hostId: lets a peer on the same host notice that we died
  uint64_t hostId;
  uint8_t address[kMaxAddressLength];
  // rdma protocol: the sender's descriptor ring, where the receiver writes its buffers' keys,
  // registered on every rail: its key on the leader, then on rails 1.. (0 where none).
  uint64_t ringAddress;
  uint64_t ringKey;
  uint64_t ringRailKeys[kMaxRails - 1];
  RailAddresses rails;
};
static_assert(sizeof(ConnectMessage) == 320);

// Listener → sender: "your receiver is recv comm `recvCommId`, and its rails 1.. are at these
// addresses" (rdma writes data on every rail; rail 0, the leader, is the listen handle's).
struct AcceptMessage {
  static constexpr uint32_t kMagic = 0x4d41464eu;  // "NFAM"
  uint32_t magic;
  uint16_t version;
  uint16_t length;
  uint32_t recvCommId;
  uint32_t senderCommId;
  uint32_t pid;
  uint32_t protocol;  // protocol::ProtocolId of the receiver
  uint64_t hostId;
  RailAddresses rails;
};
static_assert(sizeof(AcceptMessage) == 184);

// This process's identity as carried in set-up messages.
uint32_t localPid();
uint64_t localHostId();

uint32_t providerHash(const std::string& provider);

// `address`: the leader's; `moreRails`: the addresses of rails 1..moreRailCount, each
// `addressLength` bytes, of which the handle keeps those that fit. Throws std::runtime_error when
// the leader's does not.
ListenHandle makeListenHandle(uint32_t listenerId, const std::string& provider, const void* address,
                              size_t addressLength, const uint8_t* const* moreRails = nullptr,
                              size_t moreRailCount = 0);
// Validates `size` bytes at `data` as a listen handle of `provider`.
bool decodeListenHandle(const void* data, size_t size, const std::string& provider,
                        ListenHandle* out, std::string* reason);

// `railAddresses`: the addresses of rails 1..rails-1, each `railAddressLength` bytes (null with
// one rail). Throws std::runtime_error when they do not fit.
RailAddresses makeRailAddresses(size_t rails, const uint8_t* const* railAddresses,
                                size_t railAddressLength);

// `protocol`, `ringAddress`, `ringKey`: the data protocol and, for rdma, the descriptor ring;
// `ringRailKeys`: its keys on rails 1..kMaxRails-1 (null: none); `rails`: the sender's.
ConnectMessage makeConnectMessage(uint32_t senderCommId, uint32_t listenerId, const void* address,
                                  size_t addressLength, uint16_t protocol = 0,
                                  uint64_t ringAddress = 0, uint64_t ringKey = 0,
                                  const uint64_t* ringRailKeys = nullptr,
                                  const RailAddresses& rails = makeRailAddresses(1, nullptr, 0));
bool decodeConnectMessage(const void* data, size_t size, uint32_t expectedListenerId,
                          ConnectMessage* out, std::string* reason);

AcceptMessage makeAcceptMessage(uint32_t recvCommId, uint32_t senderCommId, uint32_t protocol = 0,
                                const RailAddresses& rails = makeRailAddresses(1, nullptr, 0));
bool decodeAcceptMessage(const void* data, size_t size, uint32_t expectedSenderCommId,
                         AcceptMessage* out, std::string* reason);

}  // namespace nnf::core::wire
