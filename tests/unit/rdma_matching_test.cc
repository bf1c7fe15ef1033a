// The rdma protocol's order-free bookkeeping (protocol/rdma_matching.h, rdma_wire.h): immediate
// data encodings, descriptors and sends meeting whichever comes first, bounded tables, segment
// accounting. The real sender and receiver under any delivery order: rdma_protocol_test.cc.
#include <gtest/gtest.h>

#include <vector>

#include "nccl_net/net.h"
#include "protocol/rdma_matching.h"
#include "protocol/rdma_slot_progress.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {
namespace {

TEST(RdmaImmediate, DataFieldsSurviveEncoding) {
  for (uint32_t comm : {1u, 77u, kMaxCommId}) {
    for (uint32_t slot : {0u, 5u, kSlots - 1}) {
      for (uint32_t index : {0u, 3u, kGroup - 1}) {
        for (uint32_t segments : {0u, 1u, kMaxSegments}) {
          Immediate imm = decode(encodeData(comm, slot, index, segments, 0xfffffffeu));
          EXPECT_EQ(imm.kind, ImmKind::kData);
          EXPECT_EQ(imm.commId, comm);
          EXPECT_EQ(imm.slot, slot);
          EXPECT_EQ(imm.index, index);
          EXPECT_EQ(imm.segments, segments);
          EXPECT_EQ(imm.length, 0xfffffffeu);
        }
      }
    }
  }
}

TEST(RdmaImmediate, DescriptorFieldsSurviveEncodingInFourBytes) {
  for (uint32_t count = 1; count <= kGroup; ++count) {
    uint64_t data = encodeDescriptors(kMaxCommId, kSlots - 1, count);
    EXPECT_EQ(data >> 32, 0u) << "EFA carries 4 bytes of immediate data";
    Immediate imm = decode(data);
    EXPECT_EQ(imm.kind, ImmKind::kDescriptors);
    EXPECT_EQ(imm.commId, kMaxCommId);
    EXPECT_EQ(imm.slot, kSlots - 1);
    EXPECT_EQ(imm.count, count);
  }
}

TEST(RdmaMatching, DescriptorAndSendMeetWhicheverComesFirst) {
  SendMatcher matcher;
  WaitLink link, other, given;
  matcher.addWaiting(&link, 7, 1);
  matcher.addWaiting(&given, 9, 1);
  matcher.addWaiting(&other, 7, 3);
  EXPECT_EQ(matcher.takeWaiting(7, 2), nullptr);
  EXPECT_EQ(matcher.takeWaiting(8, 1), nullptr);
  EXPECT_EQ(matcher.takeWaiting(7, 1), &link);
  EXPECT_EQ(matcher.takeWaiting(7, 1), nullptr) << "taken once";
  EXPECT_TRUE(matcher.removeWaiting(&given)) << "a send given up leaves the list";
  EXPECT_FALSE(matcher.removeWaiting(&given));
  EXPECT_EQ(matcher.takeWaiting(9, 1), nullptr);
  EXPECT_EQ(matcher.takeWaiting(7, 3), &other) << "the tail survives removals before it";
  WaitLink last;
  matcher.addWaiting(&last, 1, 1);
  EXPECT_EQ(matcher.takeWaiting(1, 1), &last) << "appending after the list emptied";
  EXPECT_EQ(matcher.sendsWaiting(), 0u);
  matcher.addDescriptor(Arrived{7, 2, 3, 1});
  Arrived out;
  EXPECT_FALSE(matcher.takeDescriptor(7, 1, &out));
  ASSERT_TRUE(matcher.takeDescriptor(7, 2, &out));
  EXPECT_EQ(out.slot, 3);
  EXPECT_EQ(out.index, 1);
  EXPECT_EQ(matcher.descriptorsHeld(), 0u);
}

// The receiver may run a whole ring ahead of its sender, and a sender a whole request pool
// ahead of its receiver: neither may allocate on the data path.
TEST(RdmaMatching, TablesHoldTheirBoundWithoutGrowing) {
  SendMatcher matcher;
  WaitLink first;
  matcher.addWaiting(&first, 0, 0);  // a first waiting send reserves the descriptor table too
  EXPECT_GE(matcher.capacity(), SendMatcher::kSingleEntries) << "one entry a slot at least";
  EXPECT_EQ(matcher.takeWaiting(0, 0), &first);
  // Receives of one buffer: one descriptor a slot, without growing.
  const size_t single = matcher.capacity();
  for (size_t i = 0; i < SendMatcher::kSingleEntries; ++i) {
    matcher.addDescriptor(Arrived{3, static_cast<uint16_t>(i), static_cast<uint8_t>(i), 0});
  }
  EXPECT_EQ(matcher.capacity(), single) << "single-buffer receives grew the table";
  for (size_t i = 0; i < SendMatcher::kSingleEntries; ++i) {
    Arrived out;
    ASSERT_TRUE(matcher.takeDescriptor(3, static_cast<uint16_t>(i), &out));
  }
  // The first group takes the whole bound; nothing grows after it.
  matcher.expectGroup(kGroup);
  const size_t reserved = matcher.capacity();
  EXPECT_GE(reserved, SendMatcher::kMaxEntries);
  matcher.addDescriptor(Arrived{0, 0, 0, 0});
  for (size_t i = 1; i < SendMatcher::kMaxEntries; ++i) {
    matcher.addDescriptor(Arrived{2, static_cast<uint16_t>(i), 0, 0});
  }
  EXPECT_EQ(matcher.descriptorsHeld(), SendMatcher::kMaxEntries);
  EXPECT_EQ(matcher.capacity(), reserved) << "the table grew: the data path allocated";
  std::vector<WaitLink> links(size_t{abi::kMaxRequests} * kGroup);
  for (size_t i = 0; i < links.size(); ++i) {
    matcher.addWaiting(&links[i], 1, static_cast<uint16_t>(i));
  }
  EXPECT_EQ(matcher.sendsWaiting(), links.size());
  EXPECT_EQ(matcher.capacity(), reserved) << "waiting sends must not need a table";
}

TEST(RdmaMatching, SlotProgressRejectsWhatNoReceiveExpects) {
  SlotProgress slot;
  uint64_t total = 0;
  EXPECT_EQ(slot.onSegment(0, 1, 10, &total), SegmentOutcome::kInvalid) << "never armed";
  uint64_t sizes[2] = {100, 50};
  slot.arm(2, sizes);
  EXPECT_EQ(slot.onSegment(2, 1, 10, &total), SegmentOutcome::kInvalid)
      << "buffer index past the group";
  EXPECT_EQ(slot.onSegment(1, 1, 51, &total), SegmentOutcome::kInvalid)
      << "more bytes than the buffer holds";
  EXPECT_EQ(slot.onSegment(0, 2, 60, &total), SegmentOutcome::kPending);
  EXPECT_EQ(slot.onSegment(0, 3, 10, &total), SegmentOutcome::kInvalid)
      << "segment count disagrees with the first segment";
  slot.arm(2, sizes);
  EXPECT_EQ(slot.onSegment(0, 2, 60, &total), SegmentOutcome::kPending);
  EXPECT_EQ(slot.onSegment(0, 2, 40, &total), SegmentOutcome::kComplete);
  EXPECT_EQ(total, 100u);
  EXPECT_EQ(slot.onSegment(0, 2, 1, &total), SegmentOutcome::kInvalid)
      << "a completed buffer takes nothing more";
  EXPECT_EQ(slot.onSegment(1, 0, 0, &total), SegmentOutcome::kTruncated);
  slot.disarm();
  EXPECT_EQ(slot.onSegment(1, 1, 0, &total), SegmentOutcome::kInvalid) << "disarmed";
}

// A slot re-armed for a smaller group, with or without a release between, takes nothing for the
// buffers past it: arm() and disarm() touch only the buffers in use, not all eight.
TEST(RdmaMatching, ASlotReArmedForFewerBuffersRejectsTheOthers) {
  SlotProgress slot;
  uint64_t total = 0;
  uint64_t sizes[3] = {10, 20, 30};
  slot.arm(3, sizes);
  EXPECT_EQ(slot.groupSize(), 3u);
  slot.arm(1, sizes);
  EXPECT_EQ(slot.groupSize(), 1u);
  EXPECT_EQ(slot.onSegment(1, 1, 5, &total), SegmentOutcome::kInvalid)
      << "left from the group of 3";
  EXPECT_EQ(slot.onSegment(2, 1, 5, &total), SegmentOutcome::kInvalid)
      << "left from the group of 3";
  EXPECT_EQ(slot.onSegment(0, 1, 10, &total), SegmentOutcome::kComplete);
  slot.arm(2, sizes);
  slot.disarm();
  EXPECT_EQ(slot.groupSize(), 0u);
  slot.arm(1, sizes);
  EXPECT_EQ(slot.onSegment(1, 1, 5, &total), SegmentOutcome::kInvalid) << "released, then re-armed";
  EXPECT_EQ(slot.onSegment(0, 1, 7, &total), SegmentOutcome::kComplete);
  EXPECT_EQ(total, 7u);
}

}  // namespace
}  // namespace nnf::protocol::rdma
