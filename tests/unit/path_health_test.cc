// The table of broken paths (core/path_health.h): a path is one rail of ours to one peer; it goes
// down once, is probed on the probe schedule (core/probe_schedule.h) and rejoins, and a full table
// says so instead of forgetting a broken path.
#include <gtest/gtest.h>

#include "core/path_health.h"

namespace nnf::core {
namespace {

constexpr uint64_t kInterval = 1000;  // ns between probes

TEST(PathHealth, APathGoesDownOnceAndOthersStayUp) {
  PathHealth paths(kInterval);
  int index = -1;
  EXPECT_EQ(paths.markDown(1, 7, 0, "failed a write", &index), PathHealth::Marked::kNow);
  int again = -1;
  EXPECT_EQ(paths.markDown(1, 7, 5, "failed a read", &again), PathHealth::Marked::kAlready);
  EXPECT_EQ(again, index);
  EXPECT_EQ(paths.downCount(), 1u);
  EXPECT_TRUE(paths.isDown(1, 7));
  EXPECT_FALSE(paths.isDown(0, 7)) << "the same peer on another rail";
  EXPECT_FALSE(paths.isDown(1, 8)) << "another peer on the same rail";
  EXPECT_STREQ(paths.at(index).what, "failed a write") << "its first failure is named";
}

TEST(PathHealth, EachBrokenPathIsNamedOnce) {
  PathHealth paths(kInterval);
  int index;
  paths.markDown(2, 7, 0, "a", &index);
  paths.markDown(2, 9, 0, "b", &index);
  paths.markDown(3, 7, 0, "c", &index);
  int first = paths.takeUnnamed(2);
  int second = paths.takeUnnamed(2);
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  EXPECT_NE(first, second);
  EXPECT_EQ(paths.takeUnnamed(2), -1);
  EXPECT_GE(paths.takeUnnamed(3), 0);
  EXPECT_EQ(paths.takeUnnamed(3), -1);
}

TEST(PathHealth, ABrokenPathIsProbedWhenDueAndRejoins) {
  PathHealth paths(kInterval);
  int index;
  paths.markDown(1, 7, 100, "a", &index);
  EXPECT_EQ(paths.takeDueProbe(100 + kInterval - 1), -1);
  EXPECT_EQ(paths.nextProbeInNs(100), kInterval);
  EXPECT_EQ(paths.takeDueProbe(100 + kInterval), index);
  EXPECT_EQ(paths.nextProbeInNs(100 + kInterval), 0u) << "its probe is in flight";
  EXPECT_TRUE(paths.isDown(1, 7)) << "down while probed";
  paths.probeFailed(index, 2000);
  EXPECT_EQ(paths.takeDueProbe(2000 + kInterval - 1), -1);
  EXPECT_EQ(paths.takeDueProbe(2000 + kInterval), index);
  paths.probeSucceeded(index, 3500);
  EXPECT_FALSE(paths.isDown(1, 7));
  EXPECT_EQ(paths.downCount(), 0u);
  EXPECT_EQ(paths.nextProbeInNs(3500), UINT64_MAX);
}

TEST(PathHealth, APathThatFailsSoonAfterRejoiningWaitsLonger) {
  PathHealth paths(kInterval);
  int index;
  paths.markDown(1, 7, 0, "a", &index);
  ASSERT_EQ(paths.takeDueProbe(kInterval), index);
  paths.probeSucceeded(index, kInterval);
  // Broken again within 16 intervals of rejoining: the next probe waits two intervals.
  EXPECT_EQ(paths.markDown(1, 7, 2 * kInterval, "b", &index), PathHealth::Marked::kNow);
  EXPECT_EQ(paths.at(index).link.failures(), 2u);
  EXPECT_EQ(paths.takeDueProbe(3 * kInterval), -1);
  EXPECT_EQ(paths.takeDueProbe(4 * kInterval), index);
}

TEST(PathHealth, ARailThatFailsAsAWholeForgetsItsPathsButThoseBeingProbed) {
  PathHealth paths(kInterval);
  int probed, waiting, other;
  paths.markDown(1, 7, 0, "a", &probed);
  ASSERT_EQ(paths.takeDueProbe(kInterval), probed);
  paths.markDown(1, 8, kInterval, "b", &waiting);
  paths.markDown(2, 8, kInterval, "c", &other);
  paths.forgetRail(1);
  EXPECT_TRUE(paths.isDown(1, 7)) << "its probe is in flight: it ends with it";
  EXPECT_FALSE(paths.isDown(1, 8));
  EXPECT_TRUE(paths.isDown(2, 8));
  EXPECT_EQ(paths.downCount(), 2u);
}

TEST(PathHealth, AFullTableSaysSoAndReusesPathsThatRejoined) {
  PathHealth paths(kInterval);
  int index;
  for (size_t i = 0; i < PathHealth::kMaxPaths; ++i) {
    ASSERT_EQ(paths.markDown(1, 100 + i, 0, "a", &index), PathHealth::Marked::kNow);
  }
  EXPECT_EQ(paths.markDown(1, 99, 0, "a", &index), PathHealth::Marked::kNoRoom);
  int first = paths.takeDueProbe(kInterval);
  ASSERT_GE(first, 0);
  paths.probeSucceeded(first, kInterval);
  EXPECT_EQ(paths.markDown(1, 99, kInterval, "a", &index), PathHealth::Marked::kNow);
  EXPECT_EQ(index, first);
  EXPECT_TRUE(paths.isDown(1, 99));
}

TEST(PathHealth, APeerWithAFreshAddressKeepsItsBrokenPath) {
  PathHealth paths(kInterval);
  int index;
  paths.markDown(1, 7, 0, "a", &index);
  paths.replacePeer(1, 7, 70);
  EXPECT_FALSE(paths.isDown(1, 7));
  EXPECT_TRUE(paths.isDown(1, 70));
}

TEST(PathHealth, AForgottenPathIsUpAndItsRoomFree) {
  PathHealth paths(kInterval);
  int index;
  paths.markDown(1, 7, 0, "a", &index);
  ASSERT_EQ(paths.takeDueProbe(kInterval), index);
  paths.forget(index);  // its peer's comms closed: never posted
  EXPECT_FALSE(paths.isDown(1, 7));
  EXPECT_EQ(paths.downCount(), 0u);
  int again;
  EXPECT_EQ(paths.markDown(1, 7, 2 * kInterval, "b", &again), PathHealth::Marked::kNow);
  EXPECT_EQ(paths.at(again).link.failures(), 1u) << "a new path: its first failure";
}

TEST(PathHealth, WithoutProbesABrokenPathIsNeverProbed) {
  PathHealth paths(0);
  int index;
  paths.markDown(1, 7, 0, "a", &index);
  EXPECT_EQ(paths.takeDueProbe(UINT64_MAX / 2), -1);
  EXPECT_EQ(paths.nextProbeInNs(0), UINT64_MAX);
}

}  // namespace
}  // namespace nnf::core
