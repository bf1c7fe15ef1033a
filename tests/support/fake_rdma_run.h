// What the unit tests of the rdma protocol over the in-memory fabric share
// (tests/unit/rdma_protocol_test.cc, rdma_close_test.cc): the provider families they run on, the
// plugin's WARN lines counted rather than printed where a test expects them, and the writes that
// landed, told apart by the protocol's immediate data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "support/fake_plugin.h"

namespace nnf::test {

// One provider family the protocol tells apart.
struct FakeFamily {
  const char* name;
  FakeRailSpec rail;
  size_t rails;
  size_t eagerBytes;  // the protocol's eager limit there (provider rules, inject size)
};

// shm (in order, 8-byte immediates, eager within the inject size: the header written ahead or
// left out), tcp (in order, 8 KiB eager), efa (any order, 4-byte immediates, descriptors
// required), efa over two rails (striped).
std::vector<FakeFamily> fakeFamilies();
std::string familyName(const ::testing::TestParamInfo<FakeFamily>& info);
// The plugin over the fabric for `family`: write segments of 40 KiB (a 432 KiB message takes 11
// at little copying, and the device's largest message, 27 segments, stays above the 1 MiB shm's
// overflow room needs), one post in 64 held back, registrations released at once (no MR cache),
// striping from 64 KiB, sequence numbers that wrap early.
FakePlugin::Options fakeOptions(const FakeFamily& family, uint64_t seed);

// Installs a logger for its lifetime: WARN lines of truncations are counted, others counted and
// printed; INFO and TRACE are dropped.
class WarnCounter {
 public:
  WarnCounter();
  ~WarnCounter();
  WarnCounter(const WarnCounter&) = delete;
  WarnCounter& operator=(const WarnCounter&) = delete;
  int truncations() const;
  int others() const;
};

// The writes that landed, by what their immediate data says.
struct WriteCounts {
  uint64_t segments = 0;     // data written into described buffers
  uint64_t notices = 0;      // truncation notices
  uint64_t eager = 0;        // eager messages (with their header, or without)
  uint64_t descriptors = 0;  // descriptor groups
  uint64_t voids = 0;
  uint64_t credits = 0;
};
void countWrites(FakeFabric& fabric, WriteCounts* counts);

}  // namespace nnf::test
