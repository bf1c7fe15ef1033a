// A raw libfabric endpoint of the provider under test, apart from the plugin: for tests that
// send the plugin what a peer of its own would not (connect messages naming unusable addresses,
// control messages for closed comms, garbage). One rail of the provider the plugin would pick,
// its buffer registered where the provider needs descriptors.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "core/wire.h"
#include "fabric/rail.h"

namespace nnf::test {

class RawEndpoint {
 public:
  // Bytes one message may carry (the registered buffer's size).
  static constexpr size_t kMaxMessage = 4096;

  RawEndpoint();  // throws std::runtime_error when the provider gives no endpoint
  ~RawEndpoint();
  RawEndpoint(const RawEndpoint&) = delete;
  RawEndpoint& operator=(const RawEndpoint&) = delete;

  fabric::Rail& rail() { return *rail_; }

  // Sends `length` bytes of `data` with `tag` and waits for the send to complete.
  ::testing::AssertionResult send(fi_addr_t peer, const void* data, size_t length, uint64_t tag);
  // Sends a control message (untagged, with its header) to comm `commId` of the peer.
  ::testing::AssertionResult sendControl(fi_addr_t peer, uint32_t commId,
                                         core::wire::ControlKind kind, const void* payload,
                                         size_t length);
  // Sends `length` bytes of `data` untagged, as they are (what the peer's control channel
  // receives, header or not), and waits for the send to complete.
  ::testing::AssertionResult sendUntagged(fi_addr_t peer, const void* data, size_t length);

 private:
  template <typename Post>
  ::testing::AssertionResult post(Post&& postOnce);

  std::unique_ptr<fabric::Rail> rail_;
  std::vector<uint8_t> buffer_;
  fid_mr* mr_ = nullptr;
  void* desc_ = nullptr;
};

}  // namespace nnf::test
