// The rdma protocol's state machines (src/protocol/rdma_*_state.h, rdma_*_mode.h,
// rdma_slot_lifecycle.h, rdma_slot_progress.h; docs/architecture.md draws their tables): each
// event moves each machine where the table says, and, where the build checks them (NNF_ASSERT),
// a move the table forbids aborts.
#include <cstdint>

#include <gtest/gtest.h>

#include "log/assert.h"
#include "protocol/rdma_recv_close_state.h"
#include "protocol/rdma_recv_eager_mode.h"
#include "protocol/rdma_send_close_state.h"
#include "protocol/rdma_send_eager_mode.h"
#include "protocol/rdma_slot_lifecycle.h"
#include "protocol/rdma_slot_progress.h"

namespace nnf::protocol::rdma {
namespace {

// --- a receive slot ---

// A slot's buffers as the receiver accounts them: `count` of 64 bytes, armed.
SlotProgress groupOf(uint32_t count) {
  SlotProgress buffers;
  uint64_t sizes[kGroup] = {64, 64, 64, 64, 64, 64, 64, 64};
  buffers.arm(count, sizes);
  return buffers;
}

TEST(RdmaSlotLifecycle, ADescribedSlotIsFreeWhenItsReceiveEndsWithNoVoidOwed) {
  SlotLifecycle slots;
  SlotProgress buffers = groupOf(1);
  slots.onTake(3, /*describe=*/true);
  EXPECT_EQ(slots.state(3), SlotState::kDescribed);
  EXPECT_EQ(slots.busy(), 1u << 3);
  uint64_t total = 0;
  ASSERT_EQ(buffers.onSegment(0, 1, 8, &total), SegmentOutcome::kComplete);
  EXPECT_TRUE(slots.onReceiveEnded(3, buffers));
  EXPECT_EQ(slots.state(3), SlotState::kFree);
  EXPECT_EQ(slots.busy(), 0u);
}

// A buffer an eager message filled is answered by the sender's void once the sender has read
// its descriptor: until then the slot's ring entry must not be written again.
TEST(RdmaSlotLifecycle, ASlotWhoseVoidsAreOwedStaysBusyUntilTheyCome) {
  SlotLifecycle slots;
  SlotProgress buffers = groupOf(2);
  slots.onTake(0, true);
  ASSERT_EQ(buffers.onEager(0, 8, /*described=*/true), SegmentOutcome::kComplete);
  ASSERT_EQ(buffers.onEager(1, 8, true), SegmentOutcome::kComplete);
  EXPECT_FALSE(slots.onReceiveEnded(0, buffers)) << "freed before its voids";
  EXPECT_EQ(slots.state(0), SlotState::kAwaitingVoids);
  EXPECT_EQ(slots.busy(), 1u) << "a slot awaiting voids is not free: its ring entry may be unread";
  ASSERT_TRUE(buffers.onVoid(1));
  EXPECT_FALSE(slots.onVoidLanded(0, buffers)) << "one void is still owed";
  EXPECT_EQ(slots.state(0), SlotState::kAwaitingVoids);
  ASSERT_TRUE(buffers.onVoid(0));
  EXPECT_TRUE(slots.onVoidLanded(0, buffers));
  EXPECT_EQ(slots.state(0), SlotState::kFree);
  EXPECT_EQ(slots.busy(), 0u);
}

TEST(RdmaSlotLifecycle, AVoidForASlotThatAwaitsNoneChangesNothing) {
  SlotLifecycle slots;
  SlotProgress buffers = groupOf(1);
  slots.onTake(5, true);
  ASSERT_TRUE(buffers.onVoid(0));  // the void came before its eager message
  EXPECT_FALSE(slots.onVoidLanded(5, buffers));
  EXPECT_EQ(slots.state(5), SlotState::kDescribed);
  ASSERT_EQ(buffers.onEager(0, 8, true), SegmentOutcome::kComplete);
  EXPECT_TRUE(slots.onReceiveEnded(5, buffers)) << "its void came first: nothing is owed";
}

TEST(RdmaSlotLifecycle, AnUndescribedSlotIsDescribedLateOrEndsWithoutDescriptors) {
  SlotLifecycle slots;
  SlotProgress buffers = groupOf(1);
  slots.onTake(1, /*describe=*/false);
  slots.onTake(2, false);
  EXPECT_EQ(slots.undescribed(), 0b110u);
  slots.onDescribeLate(1);
  EXPECT_EQ(slots.state(1), SlotState::kDescribed);
  EXPECT_EQ(slots.undescribed(), 0b100u);
  ASSERT_EQ(buffers.onEager(0, 8, /*described=*/false), SegmentOutcome::kComplete);
  EXPECT_TRUE(slots.onReceiveEnded(2, buffers)) << "no descriptor went: no void is owed";
  EXPECT_EQ(slots.undescribed(), 0u);
  slots.onReleased(1);
  EXPECT_EQ(slots.busy(), 0u);
}

// --- a buffer in a slot ---

TEST(RdmaBufferStates, SegmentsFillABufferAndNothingCountsTwice) {
  SlotProgress slot;
  uint64_t sizes[2] = {100, 100};
  slot.arm(2, sizes);
  EXPECT_EQ(slot.state(0), BufferState::kExpecting);
  uint64_t total = 0;
  EXPECT_EQ(slot.onSegment(0, 2, 60, &total), SegmentOutcome::kPending);
  EXPECT_EQ(slot.state(0), BufferState::kFilling);
  EXPECT_EQ(slot.onEager(0, 10), SegmentOutcome::kInvalid) << "filling by segments already";
  EXPECT_EQ(slot.onSegment(0, 2, 40, &total), SegmentOutcome::kComplete);
  EXPECT_EQ(slot.state(0), BufferState::kEnded);
  EXPECT_EQ(slot.onSegment(0, 2, 40, &total), SegmentOutcome::kInvalid) << "counted twice";
  EXPECT_EQ(slot.onEager(0, 10), SegmentOutcome::kInvalid) << "counted twice";
  EXPECT_FALSE(slot.voidsOwed());
  slot.disarm();
  EXPECT_EQ(slot.state(0), BufferState::kIdle);
  EXPECT_EQ(slot.state(1), BufferState::kIdle);
}

TEST(RdmaBufferStates, AVoidBeforeItsEagerMessageOwesNothingAfterIt) {
  SlotProgress slot;
  uint64_t sizes[1] = {64};
  slot.arm(1, sizes);
  ASSERT_TRUE(slot.onVoid(0));
  EXPECT_EQ(slot.state(0), BufferState::kVoidFirst);
  EXPECT_FALSE(slot.voidsOwed());
  EXPECT_EQ(slot.onEager(0, 8), SegmentOutcome::kComplete);
  EXPECT_EQ(slot.state(0), BufferState::kEnded);
  EXPECT_FALSE(slot.voidsOwed());
}

TEST(RdmaBufferStates, AnEagerMessageIntoADescribedBufferAwaitsItsVoid) {
  SlotProgress slot;
  uint64_t sizes[2] = {64, 64};
  slot.arm(2, sizes);
  EXPECT_EQ(slot.onEager(1, 8), SegmentOutcome::kComplete);
  EXPECT_EQ(slot.state(1), BufferState::kAwaitingVoid);
  EXPECT_TRUE(slot.voidsOwed());
  ASSERT_TRUE(slot.onVoid(1));
  EXPECT_EQ(slot.state(1), BufferState::kEnded);
  EXPECT_FALSE(slot.voidsOwed());
  ASSERT_TRUE(slot.onVoid(1)) << "a second void changes nothing";
  EXPECT_EQ(slot.state(1), BufferState::kEnded);
  EXPECT_FALSE(slot.onVoid(2)) << "past the group";
}

// A void that failed on a broken rail (rail recovery asks about it): the buffer that still waits
// for it says so and from then on ignores voids from that rail (a late original), so that only
// the one written again on another rail ends it; one that saw its void says it landed.
TEST(RdmaBufferStates, AVoidAskedAboutIsTakenOnceFromTheRailItWentAgainOn) {
  SlotProgress slot;
  uint64_t sizes[3] = {64, 64, 64};
  slot.arm(3, sizes);
  EXPECT_EQ(slot.onEager(0, 8), SegmentOutcome::kComplete);
  ASSERT_EQ(slot.state(0), BufferState::kAwaitingVoid);
  EXPECT_TRUE(slot.resetVoid(0, 1)) << "awaiting its void: written again";
  ASSERT_TRUE(slot.onVoid(0, 1));
  EXPECT_EQ(slot.state(0), BufferState::kAwaitingVoid) << "the late original is ignored";
  EXPECT_TRUE(slot.voidsOwed());
  ASSERT_TRUE(slot.onVoid(0, 2));
  EXPECT_EQ(slot.state(0), BufferState::kEnded) << "the void written again ends it";
  EXPECT_FALSE(slot.voidsOwed());
  EXPECT_FALSE(slot.resetVoid(0, 2)) << "ended: nothing to write again";

  // Its eager message not here yet: the void is still to come too.
  EXPECT_TRUE(slot.resetVoid(1, 0));
  ASSERT_TRUE(slot.onVoid(1, 0));
  EXPECT_EQ(slot.state(1), BufferState::kExpecting);
  ASSERT_TRUE(slot.onVoid(1, 3));
  EXPECT_EQ(slot.state(1), BufferState::kVoidFirst);
  EXPECT_EQ(slot.onEager(1, 8), SegmentOutcome::kComplete);
  EXPECT_EQ(slot.state(1), BufferState::kEnded);

  // The void landed before the question (void first): it is not written again.
  ASSERT_TRUE(slot.onVoid(2, 0));
  EXPECT_FALSE(slot.resetVoid(2, 0));
  EXPECT_FALSE(slot.resetVoid(3, 0)) << "past the group";

  // The rails ignored are the group's: the slot's next group takes voids from every rail.
  slot.arm(1, sizes);
  EXPECT_EQ(slot.onEager(0, 8), SegmentOutcome::kComplete);
  ASSERT_TRUE(slot.onVoid(0, 1));
  EXPECT_EQ(slot.state(0), BufferState::kEnded);
}

TEST(RdmaBufferStates, ASettledBufferTakesNothing) {
  SlotProgress slot;
  uint64_t sizes[2] = {64, 64};
  slot.arm(2, sizes);
  slot.settle(0);
  EXPECT_EQ(slot.state(0), BufferState::kEnded);
  uint64_t total = 0;
  EXPECT_EQ(slot.onSegment(0, 1, 8, &total), SegmentOutcome::kInvalid);
  EXPECT_EQ(slot.onEager(0, 8), SegmentOutcome::kInvalid);
}

// --- the eager mode, sender ---

struct FakeClock {
  uint64_t ns = 0;
  int reads = 0;
  uint64_t operator()() {
    ++reads;
    return ns;
  }
};

TEST(RdmaSendEagerMode, NothingGoesBeforeTheGrantNorWhenTheLimitIsZero) {
  FakeClock clock;
  SendEagerState eager;
  clock.ns = 10 * kEagerQuietNs;
  EXPECT_FALSE(eager.open(clock));
  eager.onDescriptorGroup(/*ahead=*/true, clock);
  EXPECT_EQ(eager.mode(), SendEagerMode::kUngranted);
  EXPECT_FALSE(eager.open(clock));
  SendEagerState off;
  off.onGrant(/*enabled=*/false);
  EXPECT_EQ(off.mode(), SendEagerMode::kOff);
  off.onDescriptorGroup(true, clock);
  EXPECT_EQ(off.mode(), SendEagerMode::kOff);
  EXPECT_FALSE(off.open(clock));
}

TEST(RdmaSendEagerMode, AheadSaidBeforeTheGrantOpensAtTheGrant) {
  FakeClock clock;
  SendEagerState eager;
  EXPECT_TRUE(eager.onDescriptorGroup(true, clock));
  eager.onGrant(true);
  EXPECT_EQ(eager.mode(), SendEagerMode::kAhead);
  EXPECT_TRUE(eager.open(clock));
  EXPECT_EQ(clock.reads, 0) << "ahead: no clock read on the data path";
}

TEST(RdmaSendEagerMode, TheRunEndsWithAGroupThatDoesNotSayAhead) {
  FakeClock clock;
  SendEagerState eager;
  eager.onGrant(true);
  EXPECT_TRUE(eager.onDescriptorGroup(true, clock)) << "the run starts";
  EXPECT_EQ(eager.mode(), SendEagerMode::kAhead);
  EXPECT_FALSE(eager.onDescriptorGroup(true, clock)) << "the run goes on";
  EXPECT_FALSE(eager.onDescriptorGroup(false, clock));
  EXPECT_EQ(eager.mode(), SendEagerMode::kDescribed) << "eager mode left on after the run";
  EXPECT_FALSE(eager.open(clock)) << "a descriptor came just now";
}

TEST(RdmaSendEagerMode, AQuietReceiverOpensUntilItsNextGroup) {
  FakeClock clock;
  SendEagerState eager;
  eager.onGrant(true);
  clock.ns = 5 * kEagerQuietNs;
  eager.onDescriptorGroup(false, clock);  // stamped: the first group
  clock.ns += kEagerQuietNs - 1;
  EXPECT_FALSE(eager.open(clock));
  EXPECT_EQ(eager.mode(), SendEagerMode::kDescribed);
  clock.ns += 1;
  EXPECT_TRUE(eager.open(clock));
  EXPECT_EQ(eager.mode(), SendEagerMode::kQuiet);
  for (int i = 0; i < 3; ++i) eager.onDescriptorGroup(false, clock);
  EXPECT_EQ(eager.mode(), SendEagerMode::kDescribed);
  EXPECT_FALSE(eager.open(clock)) << "the group after a quiet time is stamped whatever its number";
}

TEST(RdmaSendEagerMode, OnlyAnAheadRunHearsThatGpuBuffersGoByDescriptor) {
  FakeClock clock;
  SendEagerState eager;
  eager.onGrant(true);
  EXPECT_FALSE(eager.onGpuRefused()) << "described: the receiver describes anyway";
  EXPECT_EQ(eager.mode(), SendEagerMode::kDescribed);
  eager.onDescriptorGroup(true, clock);
  EXPECT_TRUE(eager.onGpuRefused());
  EXPECT_EQ(eager.mode(), SendEagerMode::kOff);
  EXPECT_FALSE(eager.open(clock));
}

// --- the eager mode, receiver ---

TEST(RdmaRecvEagerMode, TheGrantComesAfterTheFirstMessageOnce) {
  RecvEagerState eager;
  EXPECT_FALSE(eager.grantDue());
  eager.onMessageLanded();
  EXPECT_TRUE(eager.grantDue());
  eager.onGrant(true);
  EXPECT_EQ(eager.mode(), RecvEagerMode::kDescribing);
  EXPECT_FALSE(eager.grantDue());
  eager.onMessageLanded();
  EXPECT_EQ(eager.mode(), RecvEagerMode::kDescribing);
  RecvEagerState none;
  none.onMessageLanded();
  none.onGrant(false);
  EXPECT_EQ(none.mode(), RecvEagerMode::kOff);
  EXPECT_FALSE(none.grantDue()) << "never tried again";
  none.onDescribed(false);
  EXPECT_FALSE(none.aheadSaid());
}

TEST(RdmaRecvEagerMode, EachGroupDescribedSaysWhetherTheRunGoesOn) {
  RecvEagerState eager;
  eager.onMessageLanded();
  eager.onGrant(true);
  eager.onDescribed(/*ahead=*/true);
  EXPECT_TRUE(eager.aheadSaid());
  eager.onDescribed(true);
  EXPECT_TRUE(eager.aheadSaid());
  eager.onDescribed(false);
  EXPECT_FALSE(eager.aheadSaid()) << "eager mode left on after the run ends";
  EXPECT_EQ(eager.mode(), RecvEagerMode::kDescribing);
}

// --- the receiver's close ---

TEST(RdmaRecvClose, DescribedBuffersWaitForTheAnswerThenForEveryCountedWrite) {
  RecvCloseState close;
  close.onLanded(0);
  EXPECT_TRUE(close.onClose(/*connected=*/true, /*buffersDescribed=*/true,
                            /*writesInFlight=*/false));
  EXPECT_EQ(close.notice(), CloseNotice::kSent);
  EXPECT_EQ(close.wait(), RecvCloseWait::kAwaitingAnswer);
  EXPECT_TRUE(close.waiting());
  ClosedAck ack{{3, 1, 0, 0}};
  close.onAnswer(&ack);
  EXPECT_EQ(close.wait(), RecvCloseWait::kAwaitingWrites);
  close.onLanded(0);
  close.onLanded(1);
  EXPECT_TRUE(close.waiting()) << "one write of rail 0 is still on its way";
  EXPECT_FALSE(close.senderFinished());
  close.onLanded(0);
  EXPECT_EQ(close.wait(), RecvCloseWait::kDone);
  EXPECT_TRUE(close.senderFinished());
}

TEST(RdmaRecvClose, TheNoticeFollowsTheLastWriteIntoTheSendersRing) {
  RecvCloseState close;
  EXPECT_FALSE(close.onClose(true, false, /*writesInFlight=*/true));
  EXPECT_EQ(close.notice(), CloseNotice::kOwed);
  EXPECT_EQ(close.wait(), RecvCloseWait::kDone) << "nothing described: nothing to wait for";
  EXPECT_FALSE(close.onOwnWriteEnded(/*writesInFlight=*/true));
  EXPECT_TRUE(close.onOwnWriteEnded(false));
  EXPECT_EQ(close.notice(), CloseNotice::kSent);
  EXPECT_FALSE(close.onOwnWriteEnded(false)) << "sent once";
}

TEST(RdmaRecvClose, ASenderThatAnsweredFirstIsWaitedForOnlyForItsWrites) {
  RecvCloseState close;
  ClosedAck ack{{1, 0, 0, 0}};
  close.onAnswer(&ack);
  EXPECT_EQ(close.wait(), RecvCloseWait::kOpen);
  close.onClose(true, true, false);
  EXPECT_EQ(close.wait(), RecvCloseWait::kAwaitingWrites);
  close.onNoticeFailed();
  EXPECT_EQ(close.wait(), RecvCloseWait::kDone) << "a sender that cannot be told is gone";
  EXPECT_FALSE(close.senderFinished()) << "its write never landed";
}

TEST(RdmaRecvClose, AnUnconnectedCommTellsNobodyAndWaitsForNothing) {
  RecvCloseState close;
  EXPECT_FALSE(close.onClose(/*connected=*/false, true, false));
  EXPECT_EQ(close.notice(), CloseNotice::kUnsent);
  EXPECT_EQ(close.wait(), RecvCloseWait::kDone);
  EXPECT_FALSE(close.onOwnWriteEnded(false));
}

TEST(RdmaRecvClose, AnAnswerWithoutCountsTakesWhatLanded) {
  RecvCloseState close;
  close.onClose(true, true, false);
  close.onLanded(2);
  close.onAnswer(nullptr);
  EXPECT_EQ(close.wait(), RecvCloseWait::kDone);
  EXPECT_TRUE(close.senderFinished());
}

// --- the sender's close ---

TEST(RdmaSendClose, TheAnswerWaitsUntilNoWriteIsInFlight) {
  SendCloseState close;
  EXPECT_FALSE(close.answerNow(true)) << "nothing owed";
  close.onPeerClosed();
  EXPECT_TRUE(close.receiverDone());
  EXPECT_EQ(close.answer(), CloseAnswer::kOwed);
  EXPECT_FALSE(close.answerNow(/*idle=*/false)) << "answered with a write in flight";
  EXPECT_TRUE(close.answerNow(true));
  EXPECT_EQ(close.answer(), CloseAnswer::kSent);
  EXPECT_FALSE(close.answerNow(true)) << "sent once";
}

TEST(RdmaSendClose, OurOwnCloseAnswersUnaskedAndTheReceiversCloseAsksAgain) {
  SendCloseState close;
  close.onClose(/*connected=*/true);
  EXPECT_FALSE(close.receiverDone());
  EXPECT_TRUE(close.answerNow(true));
  close.onPeerClosed();
  EXPECT_TRUE(close.answerNow(true));
  SendCloseState unconnected;
  unconnected.onClose(false);
  EXPECT_FALSE(unconnected.answerNow(true));
}

TEST(RdmaSendClose, TheRingStaysOutOfTheArenaUntilTheReceiverClosedOrTheBoundPassed) {
  SendCloseState close;
  bool setAside = true;
  EXPECT_TRUE(close.ringExposed(/*holding=*/true, &setAside));
  EXPECT_FALSE(setAside);
  EXPECT_FALSE(close.ringExposed(false, &setAside));
  EXPECT_TRUE(setAside);
  EXPECT_EQ(close.ring(), RingState::kSetAside);
  EXPECT_TRUE(close.receiverDone());
  EXPECT_FALSE(close.ringExposed(false, &setAside));
  EXPECT_FALSE(setAside) << "set aside once";
  SendCloseState released;
  released.onPeerClosed();
  EXPECT_FALSE(released.ringExposed(true, &setAside));
  EXPECT_EQ(released.ring(), RingState::kReleased);
}

// --- the checks themselves (debug and sanitizer builds) ---

#if NNF_ASSERTS_ON
TEST(RdmaStateChecksDeathTest, AMoveTheTableForbidsAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SlotLifecycle slots;
        slots.onTake(0, true);
        slots.onTake(0, true);
      },
      "receive slot: take in state described");
  EXPECT_DEATH(
      {
        SlotLifecycle slots;
        slots.onTake(0, true);
        slots.onDescribeLate(0);  // described already
      },
      "receive slot: late description in state described");
  EXPECT_DEATH(
      {
        SlotLifecycle slots;
        SlotProgress buffers = groupOf(1);
        slots.onTake(0, false);
        buffers.onEager(0, 8, /*described=*/true);  // as though its descriptor had gone
        slots.onReceiveEnded(0, buffers);
      },
      "no transition from undescribed to awaiting voids");
  EXPECT_DEATH(
      {
        RecvEagerState eager;
        eager.onDescribed(true);
      },
      "kEagerAhead said in mode no message");
}
#else
TEST(RdmaStateChecks, AreOffInThisBuild) {
  SlotLifecycle slots;
  slots.onTake(0, true);
  EXPECT_EQ(slots.state(0), SlotState::kDescribed) << "checks compiled out change nothing";
}
#endif

}  // namespace
}  // namespace nnf::protocol::rdma
