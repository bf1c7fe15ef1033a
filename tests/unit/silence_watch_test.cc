// The rule that finds a silent path (core/silence_watch.h): a rail whose writes stop completing
// for the bound while the comm's other rails complete theirs is silent; a comm whose every rail
// stops (a slow or descheduled peer) is not; a rail that completes again, or carries nothing, is
// quiet from then on only; looks far apart start over.
#include <gtest/gtest.h>

#include "core/silence_watch.h"

namespace nnf::core {
namespace {

constexpr uint64_t kBound = 2000000000;  // ns
constexpr uint64_t kLook = kBound / 4;   // how often the device looks
constexpr size_t kRails = 4;

// Drives one comm's watch: each step is one look interval in which the rails in `landing`
// complete one write each; `busy` is what the look then sees in flight.
class Watch {
 public:
  uint32_t step(uint32_t landing, uint32_t busy) {
    for (size_t r = 0; r < kRails; ++r) {
      if ((landing & (1u << r)) != 0) watch_.landed(r);
    }
    now_ += kLook;
    SilenceWatch::Findings found = watch_.look(now_, busy, kRails, kBound);
    unwitnessed_ = found.unwitnessed;
    return found.silent;
  }
  // Steps with the same traffic until one finds a silent rail (its mask), or `steps` pass (0).
  uint32_t stepsUntilSilent(int steps, uint32_t landing, uint32_t busy, int* taken) {
    for (*taken = 1; *taken <= steps; ++*taken) {
      if (uint32_t silent = step(landing, busy)) return silent;
    }
    return 0;
  }
  void gap(uint64_t ns) { now_ += ns; }
  uint32_t unwitnessed() const { return unwitnessed_; }

 private:
  uint32_t unwitnessed_ = 0;
  SilenceWatch watch_;
  uint64_t now_ = 1000000;
};

TEST(SilenceWatch, ARailThatStopsWhileTheOthersGoOnIsSilentAfterTheBound) {
  Watch watch;
  for (int i = 0; i < 8; ++i) ASSERT_EQ(watch.step(0xf, 0xf), 0u) << "every rail completes";
  // Rail 2 completes its last write in the next interval, then nothing while it still carries
  // one; the other rails go on.
  ASSERT_EQ(watch.step(0xf, 0xf), 0u);
  int steps = 0;
  EXPECT_EQ(watch.stepsUntilSilent(20, 0xb, 0xf, &steps), 0x4u);
  // Quiet from the look that saw its last completion: the bound, then the next look.
  EXPECT_EQ(steps, static_cast<int>(kBound / kLook)) << "named at the first look past the bound";
  // Named once a bound: still stuck, it is named again only after another bound.
  EXPECT_EQ(watch.stepsUntilSilent(20, 0xb, 0xf, &steps), 0x4u);
  EXPECT_EQ(steps, static_cast<int>(kBound / kLook));
}

TEST(SilenceWatch, ASlowPeerStopsEveryRailAndNoneIsSilent) {
  Watch watch;
  for (int i = 0; i < 4; ++i) watch.step(0xf, 0xf);
  int steps = 0;
  EXPECT_EQ(watch.stepsUntilSilent(40, 0, 0xf, &steps), 0u) << "every rail stuck at once";
}

TEST(SilenceWatch, TwoRailsStuckAtOnceAreNotJudged) {
  Watch watch;
  for (int i = 0; i < 4; ++i) watch.step(0xf, 0xf);
  int steps = 0;
  EXPECT_EQ(watch.stepsUntilSilent(40, 0x9, 0xf, &steps), 0u)
      << "rails 1 and 2 stuck, 0 and 3 completing";
}

TEST(SilenceWatch, TheWitnessesMayHaveCompletedJustBeforeTheRailWasLastSeenMoving) {
  // The rail breaks with a striped message on it; the message's shares on the other rails
  // complete in the same interval as the rail's last write, and nothing completes after that
  // (the sender's window is full behind the stuck share). The witnesses are those shares.
  Watch watch;
  for (int i = 0; i < 4; ++i) watch.step(0xf, 0xf);
  ASSERT_EQ(watch.step(0xf, 0xf), 0u);
  int steps = 0;
  EXPECT_EQ(watch.stepsUntilSilent(20, 0, 0x2, &steps), 0x2u);
}

TEST(SilenceWatch, AStreamOfOneMessageAtATimeAsksForAWitness) {
  // Messages one at a time: the last ones completed before the look before rail 1's went out,
  // and nothing else moves while it is stuck (the sender waits for it). The watch asks for a
  // witness at every look; the device's ping to the peer over the leader is delivered, and the
  // rail is silent once the bound has passed.
  Watch watch;
  for (int i = 0; i < 4; ++i) watch.step(0xf, 0xf);
  ASSERT_EQ(watch.step(0, 0), 0u);
  int steps = 0;
  EXPECT_EQ(watch.stepsUntilSilent(8, 0, 0x2, &steps), 0u) << "no witness, however long";
  EXPECT_EQ(watch.unwitnessed(), 0x2u) << "a witness asked for";
  EXPECT_EQ(watch.step(0x1, 0x2), 0x2u) << "the ping over rail 0 was delivered";
  EXPECT_EQ(watch.unwitnessed(), 0u);
}

TEST(SilenceWatch, WitnessesOlderThanThatDoNotCount) {
  Watch watch;
  for (int i = 0; i < 4; ++i) watch.step(0xf, 0xf);
  ASSERT_EQ(watch.step(0x2, 0x2), 0u) << "only rail 1 completes";
  ASSERT_EQ(watch.step(0x2, 0x2), 0u) << "rail 1 completes its last write";
  int steps = 0;
  EXPECT_EQ(watch.stepsUntilSilent(20, 0, 0x2, &steps), 0u);
}

TEST(SilenceWatch, ARailThatCompletesAgainOrCarriesNothingIsNotSilent) {
  Watch watch;
  for (int i = 0; i < 4; ++i) watch.step(0xf, 0xf);
  for (int i = 0; i < 40; ++i) {
    // Rail 3 completes a write every fourth interval only (slow, not silent); rail 2 has
    // nothing in flight in every other look.
    uint32_t landing = 0x3 | (i % 4 == 0 ? 0x8u : 0u);
    uint32_t busy = 0xb | (i % 2 == 0 ? 0x4u : 0u);
    ASSERT_EQ(watch.step(landing, busy), 0u) << "interval " << i;
  }
}

TEST(SilenceWatch, LooksFarApartStartOver) {
  Watch watch;
  for (int i = 0; i < 4; ++i) watch.step(0xf, 0xf);
  // Nothing in flight: the device stops looking. Much later a write is stuck on rail 1 at the
  // first look, and the others complete: the quiet time counts from that look, not the last.
  watch.step(0xf, 0);
  watch.gap(100 * kBound);
  int steps = 0;
  EXPECT_EQ(watch.stepsUntilSilent(20, 0x1, 0x3, &steps), 0x2u);
  EXPECT_EQ(steps, static_cast<int>(kBound / kLook) + 1);
}

}  // namespace
}  // namespace nnf::core
