// The eager path's bookkeeping (src/protocol/rdma_eager.h) and its wire encodings: credits never
// let the sender reuse an entry the receiver still holds, whatever order receives free entries
// in and credit writes arrive in; voids and eager messages meet described buffers in either
// order. Both sides running together under any delivery order: rdma_protocol_test.cc.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "protocol/rdma_eager.h"
#include "protocol/rdma_eager_credits.h"
#include "protocol/rdma_eager_inbox.h"
#include "protocol/rdma_matching.h"
#include "protocol/rdma_slot_progress.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {
namespace {

TEST(RdmaEagerWire, ControlWritesDecodeToWhatWasEncoded) {
  Immediate credits = decode(encodeCredits(kMaxCommId, 255));
  EXPECT_EQ(credits.kind, ImmKind::kCredits);
  EXPECT_EQ(credits.commId, kMaxCommId);
  EXPECT_EQ(credits.count, 255u);
  Immediate eager = decode(encodeEager(12345, kEagerEntries - 1));
  EXPECT_EQ(eager.kind, ImmKind::kEager);
  EXPECT_EQ(eager.commId, 12345u);
  EXPECT_EQ(eager.slot, kEagerEntries - 1);
  Immediate gone = decode(encodeVoid(7, 31, 7));
  EXPECT_EQ(gone.kind, ImmKind::kVoid);
  EXPECT_EQ(gone.slot, 31u);
  EXPECT_EQ(gone.index, 7u);
  Immediate descriptors = decode(encodeDescriptors(9, 30, 8));
  EXPECT_EQ(descriptors.kind, ImmKind::kDescriptors);
  EXPECT_EQ(descriptors.slot, 30u);
  EXPECT_EQ(descriptors.count, 8u);
  Immediate data = decode(encodeData(9, 30, 5, 31, 4096));
  EXPECT_EQ(data.kind, ImmKind::kData);
  EXPECT_EQ(data.segments, 31u);
  EXPECT_EQ(data.length, 4096u);
  // EFA carries 32 bits: every control write fits them.
  EXPECT_EQ(encodeVoid(kMaxCommId, 31, 7) >> 32, 0u);
  EXPECT_EQ(encodeCredits(kMaxCommId, 255) >> 32, 0u);
}

TEST(RdmaEagerWire, SequenceNumbersBehindTheNextOneAcrossTheWrap) {
  EXPECT_TRUE(behind(4, 5));
  EXPECT_FALSE(behind(5, 5));
  EXPECT_FALSE(behind(6, 5));
  EXPECT_TRUE(behind(65535, 65536 + 2));  // the 16-bit number wrapped, the counter did not
  EXPECT_FALSE(behind(1, 65535));
}

TEST(RdmaEagerCredits, NothingGoesBeforeTheGrantAndEveryEntryAtMostAfterIt) {
  EagerCredits credits;
  uint32_t entry;
  EXPECT_FALSE(credits.take(&entry));
  credits.onCredits(0);
  for (uint32_t i = 0; i < kEagerEntries; ++i) {
    ASSERT_TRUE(credits.take(&entry));
    EXPECT_EQ(entry, i);
  }
  EXPECT_FALSE(credits.take(&entry)) << "one entry more than there are";
  credits.onCredits(4);
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(credits.take(&entry));
    EXPECT_EQ(entry, i);
  }
  EXPECT_FALSE(credits.take(&entry));
}

TEST(RdmaEagerCredits, AnOlderCreditWriteArrivingLateChangesNothing) {
  EagerCredits credits;
  credits.onCredits(0);
  uint32_t entry;
  for (uint32_t i = 0; i < kEagerEntries; ++i) ASSERT_TRUE(credits.take(&entry));
  credits.onCredits(8);
  credits.onCredits(4);  // sent before the 8, overtaken on the way
  EXPECT_EQ(credits.inUse(), kEagerEntries - 8);
}

TEST(RdmaEagerWire, EveryBounceEntryAndGenerationTravelsInTheEagerWrite) {
  for (uint32_t entry = 0; entry < kEagerEntries; ++entry) {
    for (uint32_t generation = 0; generation < 2 * kEagerGenerations; ++generation) {
      uint64_t data = encodeEager(kMaxCommId, entry, generation);
      ASSERT_EQ(data >> 32, 0u) << "EFA carries 32 bits";
      Immediate eager = decode(data);
      ASSERT_EQ(eager.kind, ImmKind::kEager);
      ASSERT_EQ(eager.commId, kMaxCommId);
      ASSERT_EQ(eager.slot, entry);
      ASSERT_EQ(eager.count, generation % kEagerGenerations);
    }
  }
}

// An entry takes each generation of message once: a second landing of one it took (an eager
// message written again after its rail failed, whose first write landed after all) is not
// expected, and the sender's question about it is answered "taken".
TEST(RdmaEagerInbox, AnEntryTakesEachGenerationOnce) {
  EagerInbox inbox;
  constexpr uint32_t kEntry = 5;
  for (uint32_t generation = 0; generation < 3 * kEagerGenerations; ++generation) {
    SCOPED_TRACE("generation " + std::to_string(generation));
    EXPECT_TRUE(inbox.expects(kEntry, generation));
    EXPECT_FALSE(inbox.took(kEntry, generation));
    ASSERT_TRUE(inbox.land(kEntry, 1, static_cast<uint16_t>(generation), 64));
    EXPECT_FALSE(inbox.expects(kEntry, generation)) << "its second landing";
    EXPECT_TRUE(inbox.took(kEntry, generation));
    EXPECT_TRUE(inbox.expects(kEntry, generation + 1));
    EXPECT_TRUE(inbox.expects(kEntry + 1, generation)) << "the other entries are left alone";
    // Freed in eager order only once the entries before it are: free them all.
    for (uint32_t e = 0; e < kEagerEntries; ++e) {
      if (e != kEntry) {
        ASSERT_TRUE(inbox.land(e, 2, 0, 8));
      }
      inbox.free(e);
    }
    for (uint32_t e = 0; e < kEagerEntries; ++e) {
      if (e != kEntry) {
        ASSERT_TRUE(inbox.expects(e, generation + 1));
      }
    }
  }
}

TEST(RdmaEagerWire, TheHeaderAheadAndTheSendersLimitDecodeToWhatWasEncoded) {
  Immediate header = decode(encodeEagerHeader(777, kEagerEntries - 1));
  EXPECT_EQ(header.kind, ImmKind::kEagerHeader);
  EXPECT_EQ(header.commId, 777u);
  EXPECT_EQ(header.slot, kEagerEntries - 1);
  EXPECT_EQ(encodeEagerHeader(kMaxCommId, kEagerEntries - 1) >> 32, 0u) << "EFA carries 32 bits";
  // The limit travels in units of 64 bytes, rounded down: the receiver never leaves a receive
  // undescribed for a message the sender would not send eagerly.
  for (size_t bytes : {size_t{0}, size_t{63}, size_t{4080}, size_t{4096}, size_t{8192}}) {
    Immediate limit = decode(encodeEagerLimit(kMaxCommId, bytes));
    EXPECT_EQ(limit.kind, ImmKind::kEagerLimit);
    EXPECT_EQ(limit.commId, kMaxCommId);
    EXPECT_EQ(limit.count, bytes / kEagerLimitUnit * kEagerLimitUnit) << bytes << " bytes";
  }
  EXPECT_EQ(decode(encodeEagerLimit(1, 1u << 20)).count, 255 * kEagerLimitUnit);
}

TEST(RdmaEagerWire, AMessageWithoutItsHeaderCarriesItsSequenceNumberAndLength) {
  Immediate implied = decode(encodeEagerImplied(kMaxCommId, kEagerEntries - 1, 65535, 4096));
  EXPECT_EQ(implied.kind, ImmKind::kEagerImplied);
  EXPECT_EQ(implied.commId, kMaxCommId);
  EXPECT_EQ(implied.slot, kEagerEntries - 1);
  EXPECT_EQ(implied.count, 65535u);
  EXPECT_EQ(implied.length, 4096u);
  Immediate none = decode(encodeEagerImplied(3, 0, 0, 0));
  EXPECT_EQ(none.kind, ImmKind::kEagerImplied);
  EXPECT_EQ(none.count, 0u);
  EXPECT_EQ(none.length, 0u);
}

TEST(RdmaEagerInbox, MessagesTakenInAnyOrderAreFoundWhereverTheyAre) {
  EagerInbox inbox;
  for (uint32_t e = 0; e < kEagerEntries; ++e) {
    ASSERT_TRUE(inbox.land(e, 1 + static_cast<int32_t>(e % 2), static_cast<uint16_t>(e), 10));
  }
  // In order, then backwards: the look-ahead from the last entry found must not hide any.
  for (uint32_t e = 0; e < kEagerEntries / 2; ++e) {
    ASSERT_EQ(inbox.find(1 + static_cast<int32_t>(e % 2), static_cast<uint16_t>(e)), e);
    inbox.free(e);
  }
  for (uint32_t e = kEagerEntries; e-- > kEagerEntries / 2;) {
    ASSERT_EQ(inbox.find(1 + static_cast<int32_t>(e % 2), static_cast<uint16_t>(e)), e);
    inbox.free(e);
  }
  EXPECT_EQ(inbox.held(), 0u);
  EXPECT_EQ(inbox.freed(), kEagerEntries);
}

TEST(RdmaEagerInbox, EntriesFreedOutOfOrderAreReturnedInEagerOrder) {
  EagerInbox inbox;
  for (uint32_t e = 0; e < 4; ++e) ASSERT_TRUE(inbox.land(e, 1, static_cast<uint16_t>(e), 10));
  EXPECT_FALSE(inbox.land(2, 1, 9, 10)) << "an entry written twice";
  EXPECT_EQ(inbox.find(1, 2), 2u);
  EXPECT_EQ(inbox.find(1, 9), kEagerEntries);
  EXPECT_EQ(inbox.free(2), 0u) << "entry 0 is still held: nothing may be returned";
  EXPECT_EQ(inbox.free(1), 0u);
  EXPECT_EQ(inbox.free(0), 3u);
  inbox.copying(3);
  EXPECT_EQ(inbox.find(1, 3), kEagerEntries) << "an entry being copied is taken";
  EXPECT_EQ(inbox.free(3), 4u);
}

// An entry whose message the NIC is still copying into GPU memory (an RDMA read) holds back the
// credits of every entry after it, however those are freed: the sender must not write into it
// before the read has completed.
TEST(RdmaEagerInbox, AnEntryStillBeingCopiedHoldsBackTheEntriesFreedAfterIt) {
  EagerInbox inbox;
  for (uint32_t e = 0; e < 4; ++e) ASSERT_TRUE(inbox.land(e, 1, static_cast<uint16_t>(e), 10));
  inbox.copying(0);
  EXPECT_EQ(inbox.free(1), 0u) << "entry 0 is still being read: nothing may be returned";
  EXPECT_EQ(inbox.free(2), 0u);
  EXPECT_FALSE(inbox.land(0, 1, 9, 10)) << "an entry being read written again";
  EXPECT_EQ(inbox.free(0), 3u) << "the read done: entries 0..2 are the sender's again";
  EXPECT_EQ(inbox.held(), 1u);
}

TEST(RdmaEagerSlot, AnEagerMessageAndItsVoidMeetInEitherOrder) {
  for (bool voidFirst : {false, true}) {
    SlotProgress slot;
    uint64_t sizes[2] = {100, 100};
    slot.arm(2, sizes);
    if (voidFirst) {
      ASSERT_TRUE(slot.onVoid(0));
    }
    EXPECT_EQ(slot.onEager(0, 50), SegmentOutcome::kComplete);
    EXPECT_EQ(slot.voidsOwed(), !voidFirst);
    if (!voidFirst) {
      ASSERT_TRUE(slot.onVoid(0));
    }
    EXPECT_FALSE(slot.voidsOwed());
    uint64_t total = 0;
    EXPECT_EQ(slot.onSegment(0, 1, 10, &total), SegmentOutcome::kInvalid)
        << "a write into a buffer the eager message filled";
    EXPECT_EQ(slot.onSegment(1, 1, 10, &total), SegmentOutcome::kComplete);
  }
  SlotProgress slot;
  uint64_t sizes[1] = {10};
  slot.arm(1, sizes);
  EXPECT_EQ(slot.onEager(0, 11), SegmentOutcome::kTruncated);
  EXPECT_TRUE(slot.voidsOwed()) << "the slot waits for the void even when the message is dropped";
}

TEST(RdmaEagerSlot, AnUndescribedBufferFilledEagerlyOwesNoVoid) {
  SlotProgress slot;
  uint64_t sizes[1] = {64};
  slot.arm(1, sizes);
  EXPECT_EQ(slot.onEager(0, 8, /*described=*/false), SegmentOutcome::kComplete);
  EXPECT_FALSE(slot.voidsOwed()) << "no descriptor went out, so no void comes back";
  slot.arm(1, sizes);
  EXPECT_EQ(slot.onEager(0, 65, /*described=*/false), SegmentOutcome::kTruncated);
  EXPECT_FALSE(slot.voidsOwed());
}

}  // namespace
}  // namespace nnf::protocol::rdma
