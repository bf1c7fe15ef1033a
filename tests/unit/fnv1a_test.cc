// The one FNV-1a of the plugin (topology/fnv1a.h): its values travel between peers (the listen
// handle's provider hash and checksum, the host id) and name devices to NCCL (guids), so they
// are pinned to the published test vectors of the algorithm.
#include <string>

#include <gtest/gtest.h>

#include "core/wire.h"
#include "topology/fnv1a.h"

namespace nnf::topology {
namespace {

TEST(Fnv1a, MatchesThePublishedVectors) {
  EXPECT_EQ(fnv1a32(""), 0x811c9dc5u);
  EXPECT_EQ(fnv1a32("a"), 0xe40c292cu);
  EXPECT_EQ(fnv1a32("foobar"), 0xbf9cf968u);
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(Fnv1a, BytesAndTextAgree) {
  const std::string text = "0000:13:00.0#0";
  EXPECT_EQ(fnv1a32(text.data(), text.size()), fnv1a32(text));
  EXPECT_EQ(fnv1a64(text.data(), text.size()), fnv1a64(text));
}

TEST(Fnv1a, IsTheListenHandlesProviderHash) {
  // Peers of different plugin versions compare it: the wire value is FNV-1a 32 of the name.
  EXPECT_EQ(core::wire::providerHash("efa"), fnv1a32("efa"));
  EXPECT_EQ(core::wire::providerHash("tcp;ofi_rxm"), fnv1a32("tcp;ofi_rxm"));
}

}  // namespace
}  // namespace nnf::topology
