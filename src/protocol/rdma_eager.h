// The eager path of the rdma protocol: a small message whose send finds no descriptor yet is
// written at once into a bounce entry the receiver granted, instead of waiting for its receive.
//
// The receive comm takes a bounce area at the first receive that an entry could fill posted after
// its first message has landed (so that the first message of a comm always goes by descriptor:
// its sender learns the buffer's size before it writes; and comms that are idle, carried one
// message or receive only into large buffers hold no bounce area) and grants its entries to the
// sender (a credit write:
// the Grant below into the sender's ring, immediate data kCredits). The sender writes the n-th
// eager message into entry n mod kEagerEntries: its header (tag, sequence number, length), then the
// message, as one write of two local iovs, so that the message goes straight from NCCL's buffer
// (GPU memory included: the NIC reads it). The receiver matches the header to a receive by (tag,
// sequence number), copies the message out (memcpy, or an RDMA read from its own endpoint into GPU
// memory) and frees the entry. Frees are returned in eager order, so the sender never writes into
// an entry still held: a message no receive takes holds back the credits of the later ones, and
// sends fall back to descriptors meanwhile.
//
// A receive posted while its eager message is on the way has already described its buffer: the
// sender finds that descriptor behind its sends, answers it with a void write (nothing written,
// the slot may be reused), and the receiver copies the eager message into the described buffer.
//
// Small receives need no descriptor at all: a receive of one host buffer that fits an entry is
// described with kEagerAhead, and the small receives after it are not described (one write a
// message, not two, in a ping-pong). The sender, told so, sends small messages eagerly at once
// when no descriptor is there. A receive larger than an entry, of GPU memory or of several
// buffers is described as before and ends the run. An undescribed receive that nothing filled
// within kLateDescribeNs (the sender's message is larger, or it had no entry free, or it was
// descheduled) is described then, still with kEagerAhead: a truncation is still found at the
// sender, nothing waits forever, and the run goes on. The sender answers the grant with the
// largest message it sends eagerly (kEagerLimit, 0 with NCCL_FABRIC_EAGER_MAX=0 on its side):
// larger receives are described, so that none waits kLateDescribeNs for a message that would
// never come eagerly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

// Bounce entries of a receive comm (one credit each): a sender may complete this many small sends
// beyond what the receiver has taken, without the receiver running. Under CPU contention each
// time the sender must wait for the receiver costs a scheduler slice (milliseconds), so a whole
// window of NCCL's 32 requests, and the credit writes still on their way, fit (16 entries held
// 4 KiB streams on two busy cores to 1/10 of raw tagged messages, docs/performance.md).
constexpr uint32_t kEagerEntries = 64;
static_assert(kEagerEntries <= 64, "the eager write's immediate names its entry in 6 bits");
// A send goes eagerly only when no descriptor has come for this long: the receiver has gone
// quiet (busy elsewhere). In a stream an eager message would cross its receive's descriptor
// (three writes instead of two), and tcp delivers descriptors in bursts with gaps past 50 us:
// with a 50 us quiet time two thirds of a 512-byte stream went eagerly, every one crossed, at
// 0.71 of raw against 0.97 (docs/performance.md).
constexpr uint64_t kEagerQuietNs = 1000000;
// An undescribed receive still empty after this long is described (checked every 64 tests). It
// changes nothing else: the run of undescribed receives goes on (a sender that was merely
// descheduled sends eagerly again), and the receives a sender never fills eagerly are known
// from its answer to the grant (kEagerLimit), not guessed from timings.
constexpr uint64_t kLateDescribeNs = 1000000;
// The receiver returns freed entries by this many: a credit write every 8 small messages of a
// ping-pong (every 4 cost 0.01 us more a message on shm); a window of 32 messages leaves at most
// 7 entries unreported.
constexpr uint32_t kCreditBatch = 8;
static_assert(kEagerEntries * 16 == kEagerHeadersBytes);
static_assert(kEagerEntries <= 256, "the entry travels in the control write's 8 middle bits");
static_assert(kEagerEntries < 128, "credits count modulo 256: a stale count must look stale");

// What the receiver tells its sender in every credit write (the same bytes each time, so that
// whichever credit write lands first describes the area).
// The area is registered on every rail of the receiver's device: the sender writes entry n on
// whichever rail it likes, with that rail's key (core/wire.h's version 4 says so).
struct Grant {
  uint64_t address;          // the bounce area at the receiver (the provider's addressing)
  uint64_t keys[kMaxRails];  // its remote key on each rail (0: none)
  uint32_t entries;
  uint32_t payload;  // bytes of message one entry holds
};
static_assert(sizeof(Grant) <= kGrantBytes);

// The first bytes of a bounce entry; the message follows.
struct EagerHeader {
  int32_t tag;
  uint16_t seq;
  uint16_t reserved;
  uint32_t length;
  uint32_t reserved2;
};
static_assert(sizeof(EagerHeader) == 16);

// The receiver's bounce area: its entries, each a header and room for one message. (The grant
// a credit write carries comes from the receiver's staging slot, at kGrantOffset: a comm that
// never receives eagerly touches no page of its bounce area.)
constexpr size_t eagerStride(size_t payload) {
  return (sizeof(EagerHeader) + payload + 63) / 64 * 64;
}
constexpr size_t bounceBytes(size_t payload) {
  return kEagerEntries * eagerStride(payload);
}
constexpr size_t bounceEntryOffset(uint32_t entry, size_t payload) {
  return entry * eagerStride(payload);
}

// Whether sequence number `seq` of a tag is behind `next` (the tag's next one on this side):
// 16-bit numbers, at most a few hundred apart.
inline bool behind(uint16_t seq, uint32_t next) {
  return static_cast<int16_t>(static_cast<uint16_t>(seq - static_cast<uint16_t>(next))) < 0;
}

}  // namespace nnf::protocol::rdma
