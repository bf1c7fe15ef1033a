// What the rdma protocol puts on the wire besides the data itself.
//
// The receiver describes each buffer of a grouped receive (BufferDescriptor) and writes the group
// into the sender's descriptor ring with fi_writedata; the sender writes each message straight
// into its buffer with fi_writedata. The immediate data (32 bits: EFA carries no more) says what
// landed:
//
//   bit  31      kind: 0 data segment, 1 control (bits 4..0 say which)
//   bits 30..13  comm id on the target side (18 bits, as in core/tags.h)
//   data:        bits 12..8 descriptor slot of the receive comm (one per receive in flight: at
//                most 32), bits 7..5 buffer index in the group, bits 4..0 segments of the
//                message (0: the message did not fit; nothing was written)
//   control 0, descriptors (to a send comm): bits 12..8 slot, bits 7..5 buffers minus one
//   control 1, credits (to a send comm): bits 12..5 eager entries freed so far, modulo 256
//   control 2, eager message (to a receive comm): bits 10..5 bounce entry (rdma_eager.h), bits
//              12..11 the message's generation in it (the entry's uses before it, modulo 4):
//              a message written again after its rail failed may land twice, and the receiver
//              takes only the generation it expects next (rdma_recv_recovery.h)
//   control 3, void (to a receive comm): bits 12..8 slot, bits 7..5 buffer index: the sender
//              read that descriptor but sent its message eagerly; the slot may be reused
//   control 4, eager header (to a receive comm): bits 12..5 bounce entry: the header alone,
//              written ahead of its message where the two do not fit one inline write
//              (rdma_eager.h); its message's write (control 2) follows and lands after it
//   control 5, eager limit (to a receive comm): bits 12..5 the largest message the sender
//              sends eagerly, in units of kEagerLimitUnit bytes (0: none), its answer to the
//              grant: receives above it are described (rdma_eager.h)
//   control 6, eager message without its header (to a receive comm; where the provider delivers
//              in order and carries 8 bytes): bits 12..5 bounce entry, bits 63..48 the
//              sequence number, 47..32 the length; its tag is that of the comm's last header
//
// Where the provider carries 8 bytes of immediate data (cq_data_size >= 8: shm, tcp) the upper
// 32 bits hold the segment's length, because not every provider reports the length of a remote
// write (tcp in libfabric 1.17 reports 0); a truncation notice carries there the size that was
// sent. EFA (4 bytes) reports the length in the completion.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tags.h"
#include "memory/region.h"

namespace nnf::protocol::rdma {

// Comm ids are the core's (one width for tags and immediates).
using core::tags::kCommIdBits;
using core::tags::kMaxCommId;
constexpr uint32_t kSlotBits = 5;
constexpr uint32_t kSlots = 32;  // grouped receives in flight per comm (NCCL_NET_MAX_REQUESTS)
constexpr uint32_t kGroup = 8;   // buffers per grouped receive
constexpr uint32_t kMaxSegments = 31;  // segments one message may be cut into

enum class ImmKind : uint8_t {
  kData,
  kDescriptors,
  kCredits,
  kEager,
  kVoid,
  kEagerHeader,
  kEagerLimit,
  kEagerImplied
};

struct Immediate {
  ImmKind kind = ImmKind::kData;
  uint32_t commId = 0;
  uint32_t slot = 0;      // kData, kDescriptors, kVoid; kEager: the bounce entry
  uint32_t index = 0;     // kData, kVoid
  uint32_t segments = 0;  // kData; 0: truncation notice
  uint32_t count = 0;     // kDescriptors; kCredits: entries freed, modulo 256; kEagerLimit: bytes;
                          // kEager: the message's generation in its entry
  uint32_t length = 0;    // upper 32 bits (where the provider carries them)
};

constexpr uint64_t kLengthShift = 32;

inline uint64_t encodeData(uint32_t commId, uint32_t slot, uint32_t index, uint32_t segments,
                           uint32_t length) {
  return (uint64_t{length} << kLengthShift) | (uint64_t{commId & kMaxCommId} << 13) |
         (uint64_t{slot & ((1u << kSlotBits) - 1)} << 8) | (uint64_t{index & 7} << 5) |
         (segments & kMaxSegments);
}

inline uint64_t encodeDescriptors(uint32_t commId, uint32_t slot, uint32_t count) {
  return (uint64_t{1} << 31) | (uint64_t{commId & kMaxCommId} << 13) |
         (uint64_t{slot & ((1u << kSlotBits) - 1)} << 8) | (uint64_t{(count - 1) & 7} << 5);
}

// The control writes (kind bit set), by what bits 4..0 say.
enum class Control : uint32_t {
  kDescriptors = 0,
  kCredits = 1,
  kEager = 2,
  kVoid = 3,
  kEagerHeader = 4,
  kEagerLimit = 5,
  kEagerImplied = 6
};

inline uint64_t encodeControl(uint32_t commId, Control control, uint32_t middle) {
  return (uint64_t{1} << 31) | (uint64_t{commId & kMaxCommId} << 13) |
         (uint64_t{middle & 0xff} << 5) | static_cast<uint32_t>(control);
}
inline uint64_t encodeCredits(uint32_t commId, uint32_t freed) {
  return encodeControl(commId, Control::kCredits, freed);
}
constexpr uint32_t kEagerGenerations = 4;  // an entry's generations the immediate tells apart
inline uint64_t encodeEager(uint32_t commId, uint32_t entry, uint32_t generation = 0) {
  return encodeControl(commId, Control::kEager,
                       (entry & 0x3f) | (generation % kEagerGenerations) << 6);
}
inline uint64_t encodeEagerHeader(uint32_t commId, uint32_t entry) {
  return encodeControl(commId, Control::kEagerHeader, entry);
}
inline uint64_t encodeEagerImplied(uint32_t commId, uint32_t entry, uint16_t seq, uint16_t length) {
  return (uint64_t{seq} << 48) | (uint64_t{length} << 32) |
         encodeControl(commId, Control::kEagerImplied, entry);
}
constexpr uint32_t kEagerLimitUnit = 64;
inline uint64_t encodeEagerLimit(uint32_t commId, size_t maxBytes) {
  size_t units = maxBytes / kEagerLimitUnit;
  return encodeControl(commId, Control::kEagerLimit,
                       static_cast<uint32_t>(units < 255 ? units : 255));
}
inline uint64_t encodeVoid(uint32_t commId, uint32_t slot, uint32_t index) {
  return encodeControl(commId, Control::kVoid,
                       ((slot & ((1u << kSlotBits) - 1)) << 3) | (index & 7));
}

inline Immediate decode(uint64_t data) {
  Immediate imm;
  uint32_t low = static_cast<uint32_t>(data);
  imm.commId = (low >> 13) & kMaxCommId;
  imm.slot = (low >> 8) & ((1u << kSlotBits) - 1);
  imm.index = (low >> 5) & 7;
  imm.length = static_cast<uint32_t>(data >> kLengthShift);
  if ((low >> 31) == 0) {
    imm.kind = ImmKind::kData;
    imm.segments = low & kMaxSegments;
    return imm;
  }
  switch (static_cast<Control>(low & 31)) {
    case Control::kDescriptors:
      imm.kind = ImmKind::kDescriptors;
      imm.count = imm.index + 1;
      break;
    case Control::kCredits:
      imm.kind = ImmKind::kCredits;
      imm.count = (low >> 5) & 0xff;
      break;
    case Control::kEager:
      imm.kind = ImmKind::kEager;
      imm.slot = (low >> 5) & 0x3f;
      imm.count = (low >> 11) & 3;  // generation
      break;
    case Control::kEagerHeader:
      imm.kind = ImmKind::kEagerHeader;
      imm.slot = (low >> 5) & 0xff;
      break;
    case Control::kEagerLimit:
      imm.kind = ImmKind::kEagerLimit;
      imm.count = ((low >> 5) & 0xff) * kEagerLimitUnit;
      break;
    case Control::kEagerImplied:
      imm.kind = ImmKind::kEagerImplied;
      imm.slot = (low >> 5) & 0xff;
      imm.count = static_cast<uint32_t>(data >> 48);            // sequence number
      imm.length = static_cast<uint32_t>(data >> 32) & 0xffff;  // bytes
      break;
    default:
      imm.kind = ImmKind::kVoid;
      break;
  }
  return imm;
}

// One receive buffer as the sender sees it. `seq` counts messages per NCCL tag on the comm, so
// the n-th send with tag t takes the n-th buffer with tag t, whatever order descriptors arrive in.
// The buffer is registered on every rail of the receiver's device: one key each (the address is
// the same on all of them, as the provider is).
constexpr size_t kMaxRails = memory::kMaxRails;
struct BufferDescriptor {
  uint64_t address;  // where the sender writes (the provider's addressing: virtual or offset)
  uint64_t size;     // bytes the buffer holds
  uint64_t keys[kMaxRails];  // remote key of its registration on each rail (0: none)
  int32_t tag;
  uint16_t seq;
  uint16_t flags;  // kSettled, kEagerAhead
  // On a group's first buffer: how many groups its slot has carried, this one included. A
  // descriptor write that failed with its rail goes again on another, and may have landed all
  // the same: the sender takes a slot's group once (a later one always counts higher).
  uint32_t generation;
  uint32_t reserved2;
};
static_assert(sizeof(BufferDescriptor) == 64);
// An eager message filled the buffer already: the sender skips it.
constexpr uint16_t kSettled = 1;
// On a group's first buffer: the receiver's next small receives may go undescribed (see
// rdma_eager.h), so small sends that find no descriptor go eagerly at once.
constexpr uint16_t kEagerAhead = 2;

// A group's descriptors take one ring entry; the ring has one entry per slot (16 KiB a comm).
// The close notice (a control header) comes first, then the receiver's eager grant and the
// sender's eager headers (rdma_eager.h), so that a comm with few receives in flight touches only
// the first page of its arena slot: slots are taken lowest first.
constexpr size_t kEntryBytes = kGroup * sizeof(BufferDescriptor);
constexpr size_t kRingBytes = kSlots * kEntryBytes;
constexpr size_t kNoticeBytes = 64;
constexpr size_t kNoticeOffset = 0;
constexpr size_t kGrantOffset = kNoticeBytes;  // written by the receiver (rdma::Grant)
constexpr size_t kGrantBytes = 64;
constexpr size_t kEagerHeadersOffset = kGrantOffset + kGrantBytes;  // the sender's own
constexpr size_t kEagerHeadersBytes = 64 * 16;  // kEagerEntries headers (rdma_eager.h)
// Each side's staging of its rail recovery message (RailQuery, RailAnswer below).
constexpr size_t kRecoveryOffset = kEagerHeadersOffset + kEagerHeadersBytes;
constexpr size_t kRecoveryBytes = 64;
constexpr size_t kRingOffset = kRecoveryOffset + kRecoveryBytes;
constexpr size_t kArenaSlotBytes = kRingOffset + kRingBytes;
constexpr size_t entryOffset(uint32_t slot) {
  return kRingOffset + size_t{slot} * kEntryBytes;
}

// The payload of kClosedAck: how many writes with immediate data of the sender's toward the
// comm completed, per rail (injected ones counted when posted). The receiver's close waits until
// as many have landed on each rail: on tcp a write completes once sent, and one on another rail
// than the leader's acknowledgement may still be on its way.
struct ClosedAck {
  uint64_t written[kMaxRails];
};
static_assert(sizeof(ClosedAck) == 32);

// Rail recovery (docs/failover.md, step 3), the protocol's own control messages
// (wire::ControlKind::kProtocol). A write of the sender's failed on a rail whose path broke: it
// may or may not have landed (efa may lose the acknowledgement), and the receiver may have
// counted some of that rail's segments. The sender asks (RailQuery) about the buffer it wrote
// into, named by slot, index and the (tag, sequence number) its descriptor had; the receiver
// answers (RailAnswer) that the buffer ended (nothing to do: it completed, or its slot serves
// another group now), or that it forgot what landed on that rail for the buffer, ignores the rest
// of that rail for it, and waits for that rail's shares again (two where one was written again
// onto it after another rail failed): the sender writes each again, whole, on a rail that is up
// and that the buffer does not ignore (`ignoredRails`), with the same immediate data.
// An eager message that failed on a down rail is asked about the same way (kEagerQuery: `slot`
// its bounce entry, `index` its generation there): the receiver
// answers that it landed (the entry took that generation) or that it did not (the sender writes
// it again, whole, on a rail that is up; should the original land after all, the receiver takes
// one of the two by the generation the immediate carries).
// A void that failed so (kVoidQuery) is named like a data write, by slot, index and (tag,
// sequence number): the receiver answers that the buffer still waits for it (then it ignores
// voids from that rail for the buffer, and the sender writes the void again on a rail that is
// up), or that it does not (it landed, or the slot serves another group now).
enum class RecoveryKind : uint32_t {
  kQuery = 1,
  kAnswer = 2,
  kEagerQuery = 3,
  kEagerAnswer = 4,
  kVoidQuery = 5,
  kVoidAnswer = 6
};
struct RailQuery {
  uint32_t kind;  // RecoveryKind::kQuery
  uint32_t slot;
  uint32_t index;
  int32_t tag;
  uint32_t seq;
  uint32_t rail;  // the rail whose share is in doubt
};
struct RailAnswer {
  uint32_t kind;  // RecoveryKind::kAnswer
  uint32_t slot;
  uint32_t index;
  uint32_t rail;
  uint32_t resend;        // 1: write the share again; 0: the buffer ended, nothing to write
  uint32_t ignoredRails;  // data: bit r, the buffer ignores rail r from now on (`rail` included)
};
static_assert(16 + sizeof(RailQuery) <= kRecoveryBytes && 16 + sizeof(RailAnswer) <= kRecoveryBytes,
              "a control header and the message fit the staging area");

// Messages are cut into segments no longer than this, so that a length fits 32 bits.
constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 31;
// A striped message gives each rail a share rounded up to this (whole pages, and a multiple of
// the 128 bytes EFA orders writes by).
constexpr uint64_t kStripeAlign = 4096;
// The largest message: every rail's share is cut into segments, and all of them must fit the
// immediate's segment count.
constexpr uint64_t kMaxMessageBytes = (kMaxSegments - kMaxRails) * kMaxSegmentBytes;

}  // namespace nnf::protocol::rdma
