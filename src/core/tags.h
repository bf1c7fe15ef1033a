// The 64-bit libfabric tag: every comm of a device shares one endpoint, so the tag alone tells
// which comm, which message and which NCCL tag a message belongs to.
//
//   bit 63      0 (control messages are untagged: see control_channel.h)
//   bits 62..45 comm id on the receiving side (18 bits)
//   bits 44..32 sequence number of this NCCL tag on this comm (13 bits, wraps)
//   bits 31..0  NCCL tag
//
// The sequence number counts messages per NCCL tag, so the n-th send with tag t matches the
// n-th receive buffer with tag t whatever order the provider delivers or matches them in.
#pragma once

#include <cstdint>

namespace nnf::core::tags {

constexpr int kCommIdBits = 18;
constexpr int kSeqBits = 13;
constexpr uint32_t kMaxCommId = (1u << kCommIdBits) - 1;
constexpr uint32_t kSeqMask = (1u << kSeqBits) - 1;

// Every bit of the tag carries meaning: the provider must match all 64 (mem_tag_format).
constexpr uint64_t kBitsUsed = ~uint64_t{0};
constexpr int kCommIdShift = 45;
constexpr int kSeqShift = 32;

constexpr uint64_t data(uint32_t commId, uint32_t seq, int32_t ncclTag) {
  return (uint64_t{commId & kMaxCommId} << kCommIdShift) | (uint64_t{seq & kSeqMask} << kSeqShift) |
         uint64_t{static_cast<uint32_t>(ncclTag)};
}

constexpr uint32_t commId(uint64_t tag) {
  return static_cast<uint32_t>(tag >> kCommIdShift) & kMaxCommId;
}
constexpr uint32_t seq(uint64_t tag) {
  return static_cast<uint32_t>(tag >> kSeqShift) & kSeqMask;
}
constexpr int32_t ncclTag(uint64_t tag) {
  return static_cast<int32_t>(tag & 0xffffffffu);
}

}  // namespace nnf::core::tags
