// The RMA layer's per-link bookkeeping (src/rma/links.h) over a fake transport that delivers
// every write of the link (plain segments, signaled segments, signal entries, credits) in random
// order, as SRD may: every signal is applied once, never before all of its put's segments have
// landed, a strong one only after every older signal and every plain segment sent before it,
// and the source never reuses a ring slot the target still holds.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <vector>

#include "rma/links.h"

namespace nnf::rma {
namespace {

struct Message {
  enum Kind { kPlain, kSegment, kEntry, kCredit } kind;
  uint32_t field = 0;   // sequence modulo 256, or credits
  SignalEntry entry{};  // kEntry
  uint32_t op = 0;      // the put it belongs to (index into the model's puts)
};

struct Put {
  bool signaled = false;
  bool strong = false;
  uint32_t segments = 0;
  uint32_t landed = 0;
  uint32_t seq = 0;
  uint32_t plainBefore = 0;  // plain segments sent before it
  bool applied = false;
};

class Model : public InboundLink::Actions {
 public:
  explicit Model(uint32_t seed) : random_(seed) { target_.init(this, 3); }

  // Random puts, `count` of them, the transport delivering in random order throughout.
  void run(int count, int refusePercent) {
    refusePercent_ = refusePercent;
    long steps = 0;
    for (int issued = 0; issued < count || !inFlight_.empty() || !waiting_.empty(); ++steps) {
      ASSERT_LT(steps, 100L * count) << "the link stopped moving: a waiting put never got a slot";
      bool issue = issued < count && (inFlight_.empty() || random_() % 3 != 0);
      if (issue) {
        issuePut();
        ++issued;
      } else if (!inFlight_.empty()) {
        deliverOne();
      }
      startWaiting();
      // Refused applies are retried now and then, as a GPU word write completing does, and
      // whenever nothing else moves (every progress call retries them).
      if (random_() % 8 == 0 || inFlight_.empty()) target_.retry();
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Nothing refuses any more: whatever is complete gets applied.
    refusePercent_ = 0;
    target_.retry();
    for (size_t i = 0; i < puts_.size(); ++i) {
      if (puts_[i].signaled) {
        EXPECT_TRUE(puts_[i].applied) << "put " << i << " never applied";
      }
    }
  }

  bool apply(uint32_t peer, const SignalEntry& entry, const uint8_t* payload) override {
    EXPECT_EQ(peer, 3u);
    uint32_t index = static_cast<uint32_t>(entry.dstOffset);  // the model's put index
    Put& put = puts_.at(index);
    EXPECT_TRUE(put.signaled);
    EXPECT_FALSE(put.applied) << "put " << index << " applied twice";
    EXPECT_EQ(put.landed, put.segments) << "put " << index << "'s signal before its data";
    if (put.strong) {
      for (uint32_t older : signaledOrder_) {
        if (older == index) break;
        EXPECT_TRUE(puts_[older].applied)
            << "strong put " << index << " applied before older put " << older;
      }
      EXPECT_GE(static_cast<int32_t>(plainLanded_ - put.plainBefore), 0)
          << "strong put " << index << " before a plain segment sent ahead of it";
    }
    if (static_cast<int>(random_() % 100) < refusePercent_) return false;
    put.applied = true;
    ++applied_;
    return true;
  }

  void credit(uint32_t peer, uint32_t freed) override {
    Message message{Message::kCredit};
    message.field = freed & 0xff;
    inFlight_.push_back(message);
  }

  size_t applied() const { return applied_; }

 private:
  void issuePut() {
    uint32_t index = static_cast<uint32_t>(puts_.size());
    Put put;
    put.signaled = random_() % 2 == 0;
    put.strong = put.signaled && random_() % 2 == 0;
    put.segments = static_cast<uint32_t>(random_() % 5) + (put.signaled ? 0 : 1);
    puts_.push_back(put);
    if (!put.signaled) {
      for (uint32_t s = 0; s < put.segments; ++s)
        inFlight_.push_back({Message::kPlain, 0, {}, index});
      source_.notePlain(put.segments);
      return;
    }
    puts_[index].plainBefore = source_.plainSent();
    signaledOrder_.push_back(index);
    waiting_.push_back(index);
  }

  void startWaiting() {
    while (!waiting_.empty() && source_.slotFree()) {
      uint32_t index = waiting_.front();
      waiting_.pop_front();
      Put& put = puts_[index];
      put.seq = source_.takeSeq();
      ASSERT_LE(source_.unfreed(), kSlots);
      for (uint32_t s = 0; s < put.segments; ++s) {
        inFlight_.push_back({Message::kSegment, put.seq & 0xff, {}, index});
      }
      Message entry{Message::kEntry, put.seq & 0xff, {}, index};
      entry.entry.dstOffset = index;
      entry.entry.segments = static_cast<uint16_t>(put.segments);
      entry.entry.flags = put.strong ? kEntryStrong : 0;
      entry.entry.plainBefore = put.plainBefore;
      entry.entry.seq = static_cast<uint16_t>(put.seq);
      entry.entry.op = 1;
      inFlight_.push_back(entry);
    }
  }

  void deliverOne() {
    size_t pick = random_() % inFlight_.size();
    Message message = inFlight_[pick];
    inFlight_[pick] = inFlight_.back();
    inFlight_.pop_back();
    switch (message.kind) {
      case Message::kPlain:
        ++plainLanded_;
        target_.onPlain();
        break;
      case Message::kSegment:
        ++puts_[message.op].landed;
        ASSERT_TRUE(target_.onSegment(message.field)) << "segment of put " << message.op;
        break;
      case Message::kEntry:
        ASSERT_TRUE(target_.onEntry(message.field, message.entry, nullptr))
            << "entry of put " << message.op << " (sequence " << puts_[message.op].seq << ")";
        break;
      case Message::kCredit:
        source_.onCredit(message.field);
        break;
    }
  }

  std::mt19937 random_;
  OutboundLink source_;
  InboundLink target_;
  std::vector<Put> puts_;
  std::vector<uint32_t> signaledOrder_;
  std::deque<uint32_t> waiting_;
  std::vector<Message> inFlight_;
  uint32_t plainLanded_ = 0;
  size_t applied_ = 0;
  int refusePercent_ = 0;
};

TEST(RmaLinks, EverySignalAppliedOnceAfterItsDataWhateverTheDeliveryOrder) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Model model(seed);
    ASSERT_NO_FATAL_FAILURE(model.run(40000, 0));
    EXPECT_GT(model.applied(), 15000u);
  }
}

TEST(RmaLinks, SequenceNumbersWrapTheirSixteenBits) {
  // More signaled puts than the entry's 16-bit sequence counts: the target places each by the
  // window of slots it may have in flight.
  Model model(99);
  ASSERT_NO_FATAL_FAILURE(model.run(136000, 5));
  EXPECT_GT(model.applied(), 65536u);
}

TEST(RmaLinks, RefusedAppliesWaitAndKeepTheOrder) {
  // A target that often cannot apply yet (strong signals into GPU memory behind earlier ones).
  for (uint32_t seed = 11; seed <= 14; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Model model(seed);
    ASSERT_NO_FATAL_FAILURE(model.run(20000, 40));
    EXPECT_GT(model.applied(), 7000u);
  }
}

TEST(RmaLinks, CreditsOvertakenOnTheWayAreIgnored) {
  OutboundLink source;
  for (int i = 0; i < 64; ++i) source.takeSeq();
  EXPECT_FALSE(source.slotFree());
  EXPECT_TRUE(source.onCredit(32));
  EXPECT_TRUE(source.slotFree());
  EXPECT_FALSE(source.onCredit(16)) << "an older credit arriving late";
  EXPECT_EQ(source.unfreed(), 32u);
  EXPECT_FALSE(source.onCredit(200)) << "more freed than ever sent";
  EXPECT_TRUE(source.onCredit(64));
  EXPECT_EQ(source.unfreed(), 0u);
}

TEST(RmaLinks, EntriesOutsideTheWindowOrDuplicatedAreRefused) {
  struct Sink : InboundLink::Actions {
    bool apply(uint32_t, const SignalEntry&, const uint8_t*) override { return true; }
    void credit(uint32_t, uint32_t) override {}
  } sink;
  InboundLink link;
  link.init(&sink, 0);
  SignalEntry entry{};
  entry.seq = kSlots;  // the source cannot have it in flight before entry 0 is freed
  EXPECT_FALSE(link.onEntry(kSlots, entry, nullptr));
  entry.seq = 0;
  EXPECT_FALSE(link.onEntry(1, entry, nullptr)) << "the immediate and the entry disagree";
  entry.segments = 1;
  EXPECT_TRUE(link.onEntry(0, entry, nullptr));
  EXPECT_EQ(link.state(0), InboundLink::State::kWaiting);
  EXPECT_FALSE(link.onEntry(0, entry, nullptr)) << "the same entry twice";
  EXPECT_TRUE(link.onSegment(0));
  EXPECT_EQ(link.freed(), 1u) << "applied and freed once its segment landed";
  // A weak entry ahead of a missing older one is applied but keeps its slot...
  entry.seq = 2;
  entry.segments = 0;
  EXPECT_TRUE(link.onEntry(2, entry, nullptr));
  EXPECT_EQ(link.state(2), InboundLink::State::kApplied);
  EXPECT_EQ(link.freed(), 1u);
  // ...and a segment for it now is one it never announced.
  EXPECT_FALSE(link.onSegment(2));
}

}  // namespace
}  // namespace nnf::rma
