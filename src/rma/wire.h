// What the one-sided RMA layer puts on the wire: the 32-bit immediate data of its writes, the
// signal entries a source writes into its target's ring, the listen handle, and the set-up
// messages (joins at connect, window records at regMrSym). Decoders are strict: a magic, a
// version and the exact length, nothing read past what arrived.
//
// Immediate data (32 bits: EFA carries no more):
//
//   bit  31      1, and bits 4..0 all ones: the RMA mark (core/remote_writes.h), which the
//                rdma protocol's control kinds (0 to 3) never carry
//   bits 30..15  link id at the receiving device: one (group, peer) pair (16 bits)
//   bits 14..7   kSignaled, kEntry: the operation's sequence number modulo 256 (its ring slot is
//                that modulo kSlots); kCredit: the entries freed so far, modulo 256
//   bits 6..5    kind: 0 a plain put's segment, 1 a signaled put's segment, 2 a signal entry
//                written into the ring, 3 credits (to the source of the link)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/remote_writes.h"
#include "memory/region.h"

namespace nnf::rma {

// NCCL's values (nccl_rma/common.h, checked against them in src/abi/rma_entries.cc): the layers
// below the shims speak only include/nccl_net/types.h.
constexpr uint32_t kSignalOpInc = 1;
constexpr uint32_t kSignalOpAdd = 2;
constexpr uint64_t kMrFlagSignalNeverReset = 1u << 1;

constexpr uint32_t kLinkBits = 16;
constexpr uint32_t kMaxLinks = 1u << kLinkBits;  // per device; id 0 is never handed out
constexpr uint32_t kSlots = 64;                  // signaled puts in flight per link
constexpr uint32_t kCreditBatch = 16;            // freed entries reported at once
static_assert(256 % kSlots == 0 && kSlots <= 128, "the 8-bit sequence must name a slot");

enum class ImmKind : uint32_t { kPlain = 0, kSignaled = 1, kEntry = 2, kCredit = 3 };

struct Immediate {
  ImmKind kind = ImmKind::kPlain;
  uint32_t link = 0;
  uint32_t field = 0;  // sequence modulo 256, or credits modulo 256
};

inline uint64_t encode(ImmKind kind, uint32_t link, uint32_t field) {
  return core::kRmaImmediateMark | (uint64_t{link & (kMaxLinks - 1)} << 15) |
         (uint64_t{field & 0xff} << 7) | (uint64_t{static_cast<uint32_t>(kind)} << 5);
}

inline Immediate decode(uint64_t data) {
  uint32_t low = static_cast<uint32_t>(data);
  Immediate imm;
  imm.link = (low >> 15) & (kMaxLinks - 1);
  imm.field = (low >> 7) & 0xff;
  imm.kind = static_cast<ImmKind>((low >> 5) & 3);
  return imm;
}

// A signaled put's entry in its target's ring (one ring of kSlots entries per source): what the
// target applies once every segment of the put has landed. Small puts from host memory into host
// memory carry their bytes here (`inlineBytes`), so that they cost one write.
constexpr uint8_t kEntryStrong = 1;
constexpr uint32_t kNoWindow = 0xffffffffu;
struct SignalEntry {
  uint64_t signalOffset;  // in the target's window `signalWindow`
  uint64_t value;         // kSignalOpAdd's addend
  uint64_t dstOffset;     // inline bytes go here, in window `dstWindow`
  uint32_t signalWindow;
  uint32_t dstWindow;  // kNoWindow without inline bytes
  uint32_t plainBefore;  // strong: the plain segments the source sent on the link before it
  uint16_t segments;     // data segments written separately
  uint8_t op;            // kSignalOpInc or kSignalOpAdd
  uint8_t flags;         // kEntryStrong
  uint16_t inlineBytes;
  uint16_t seq;  // the operation's sequence number on the link, modulo 65536
  uint32_t reserved;
  uint8_t payload[80];
};
constexpr size_t kEntryBytes = sizeof(SignalEntry);
constexpr size_t kEntryHeaderBytes = offsetof(SignalEntry, payload);
constexpr size_t kInlineMax = sizeof(SignalEntry::payload);
static_assert(kEntryBytes == 128 && kEntryHeaderBytes == 48);
constexpr size_t kRingBytes = size_t{kSlots} * kEntryBytes;  // one link's ring

// The 128-byte handle listen() writes and every rank's connect() reads.
struct ListenHandle {
  static constexpr uint32_t kMagic = 0x4852464eu;  // "NFRH"
  static constexpr size_t kMaxAddress = 96;
  uint32_t magic;
  uint16_t version;
  uint16_t addressLength;
  uint32_t listenerId;
  uint32_t providerHash;  // refuses a handle of another provider
  uint32_t checksum;      // over every other byte
  uint32_t reserved;
  uint64_t nonce;  // tells this listener from an earlier one of the same id
  uint8_t address[kMaxAddress];
};
static_assert(sizeof(ListenHandle) == 128);

// What follows the core's control header of a kRma control message.
enum class MessageKind : uint32_t { kJoin = 1, kWindow = 2 };
constexpr uint16_t kVersion = 1;
constexpr size_t kMaxRailAddress = 48;

// Rank `rank` of `nranks` to every rank's listener: "my group is comm `groupId` (messages to it
// carry `session`), my links start at `linkBase`, your ring of entries from me is at `ring` +
// your rank * kRingBytes, my rails after the leader are at these addresses".
struct JoinMessage {
  static constexpr uint32_t kMagic = 0x4a52464eu;  // "NFRJ"
  uint32_t magic;
  uint16_t version;
  uint16_t rails;  // 1..kMaxRails
  uint32_t kind;   // MessageKind::kJoin
  uint32_t rank;
  uint32_t nranks;
  uint32_t listenerId;  // the listener it is addressed to
  uint64_t listenerNonce;
  uint32_t groupId;
  uint32_t session;
  uint32_t linkBase;
  uint32_t pid;
  uint64_t hostId;
  uint64_t ringAddress;
  uint64_t ringKey;
  uint16_t railAddressLength;
  uint16_t reserved[3];
  uint8_t railAddresses[memory::kMaxRails - 1][kMaxRailAddress];
};
static_assert(sizeof(JoinMessage) == 224);

// A rank's record of one window after regMrSym (windows are numbered in registration order, the
// same on every rank): where peers reach it on each rail.
struct WindowMessage {
  static constexpr uint32_t kMagic = 0x5752464eu;  // "NFRW"
  uint32_t magic;
  uint16_t version;
  uint16_t hostMemory;  // 1: the window is host memory (inline bytes may go into it)
  uint32_t kind;        // MessageKind::kWindow
  uint32_t session;     // the receiving group's
  uint32_t rank;
  uint32_t index;
  uint64_t size;
  uint64_t address;
  uint64_t keys[memory::kMaxRails];
};
static_assert(sizeof(WindowMessage) == 72);

uint32_t handleChecksum(const ListenHandle& handle);
ListenHandle makeListenHandle(uint32_t listenerId, uint64_t nonce, const std::string& provider,
                              const void* address, size_t length);
bool decodeListenHandle(const void* data, const std::string& provider, ListenHandle* out,
                        std::string* reason);
// The kind of a kRma control payload (false: too short or foreign).
bool messageKind(const uint8_t* data, size_t length, MessageKind* out);
bool decodeJoin(const uint8_t* data, size_t length, JoinMessage* out, std::string* reason);
bool decodeWindow(const uint8_t* data, size_t length, WindowMessage* out, std::string* reason);

}  // namespace nnf::rma
