#include "support/raw_endpoint.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <cstring>
#include <stdexcept>

#include "fabric/provider.h"
#include "support/plugin_ops.h"

namespace nnf::test {

RawEndpoint::RawEndpoint() {
  fabric::ProviderChoice choice = fabric::selectProvider("");
  rail_ = std::make_unique<fabric::Rail>(choice.domains.at(0).get(), 0);
  buffer_.resize(kMaxMessage);
  if (rail_->needsLocalRegistration()) {
    int ret =
        fi_mr_reg(rail_->domain(), buffer_.data(), buffer_.size(), FI_SEND, 0, 0, 0, &mr_, nullptr);
    if (ret != 0) throw std::runtime_error("fi_mr_reg failed");
    desc_ = fi_mr_desc(mr_);
  }
}

RawEndpoint::~RawEndpoint() {
  // The registration before its domain: libfabric's efa provider frees the domain's MR map at
  // close, and closing an MR after that faults there.
  if (mr_ != nullptr) fi_close(&mr_->fid);
  rail_.reset();
}

::testing::AssertionResult RawEndpoint::send(fi_addr_t peer, const void* data, size_t length,
                                             uint64_t tag) {
  if (length > buffer_.size()) return ::testing::AssertionFailure() << "message too long";
  if (length > 0) memcpy(buffer_.data(), data, length);
  return post([&] { return rail_->tsend(buffer_.data(), length, desc_, peer, tag, this); });
}

::testing::AssertionResult RawEndpoint::sendControl(fi_addr_t peer, uint32_t commId,
                                                    core::wire::ControlKind kind,
                                                    const void* payload, size_t length) {
  core::wire::ControlHeader header = core::wire::makeControlHeader(commId, kind, length);
  if (sizeof(header) + length > buffer_.size())
    return ::testing::AssertionFailure() << "message too long";
  memcpy(buffer_.data(), &header, sizeof(header));
  if (length > 0 && payload != nullptr) memcpy(buffer_.data() + sizeof(header), payload, length);
  return post(
      [&] { return rail_->send(buffer_.data(), sizeof(header) + length, desc_, peer, this); });
}

::testing::AssertionResult RawEndpoint::sendUntagged(fi_addr_t peer, const void* data,
                                                     size_t length) {
  if (length > buffer_.size()) return ::testing::AssertionFailure() << "message too long";
  if (length > 0) memcpy(buffer_.data(), data, length);
  return post([&] { return rail_->send(buffer_.data(), length, desc_, peer, this); });
}

template <typename Post>
::testing::AssertionResult RawEndpoint::post(Post&& postOnce) {
  Deadline deadline(kOpTimeoutSec);
  ssize_t ret;
  while ((ret = postOnce()) == -FI_EAGAIN) {
    fi_cq_tagged_entry entry;
    rail_->readCompletions(&entry, 1);
    if (deadline.expired()) return ::testing::AssertionFailure() << "the send kept EAGAIN";
  }
  if (ret != 0) return ::testing::AssertionFailure() << "the send: " << fi_strerror(-ret);
  while (!deadline.expired()) {
    fi_cq_tagged_entry entry;
    ssize_t n = rail_->readCompletions(&entry, 1);
    if (n == 1) return ::testing::AssertionSuccess();
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry error;
      const char* text = nullptr;
      rail_->readError(&error, &text);
      return ::testing::AssertionFailure() << "send failed: " << fi_strerror(error.err);
    }
  }
  return ::testing::AssertionFailure() << "send did not complete";
}

}  // namespace nnf::test
