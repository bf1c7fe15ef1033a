#include "support/recording_registrar.h"

namespace nnf::test {

int RecordingRegistrar::registerRegion(const memory::Region& region, memory::Registration* out) {
  int rc = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (failCount_ > 0) {
      --failCount_;
      rc = failError_;
    } else if (inner_ == nullptr) {
      uint64_t id = nextFake_++;
      out->desc = reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + id));
      out->key = id;
      out->remoteBase = reinterpret_cast<uint64_t>(region.base);
      out->base = region.base;
      out->length = region.length;
      out->provider = nullptr;
    }
  }
  // Forward outside our lock: the inner registrar takes its own.
  if (rc == 0 && inner_ != nullptr) rc = inner_->registerRegion(region, out);
  std::lock_guard<std::mutex> guard(mutex_);
  calls_.push_back(
      {true, region.base, region.length, region.type, region.device, region.access, rc});
  return rc;
}

int RecordingRegistrar::deregister(memory::Registration& registration) {
  Call call{false, registration.base, registration.length, memory::MemType::kHost, -1, 0, 0};
  int rc = inner_ != nullptr ? inner_->deregister(registration) : 0;
  if (inner_ == nullptr) registration = memory::Registration{};
  call.result = rc;
  std::lock_guard<std::mutex> guard(mutex_);
  calls_.push_back(call);
  return rc;
}

void RecordingRegistrar::failNext(int error, int count) {
  std::lock_guard<std::mutex> guard(mutex_);
  failError_ = error;
  failCount_ = count;
}

std::vector<RecordingRegistrar::Call> RecordingRegistrar::calls() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return calls_;
}

size_t RecordingRegistrar::registrations() const {
  std::lock_guard<std::mutex> guard(mutex_);
  size_t count = 0;
  for (const Call& call : calls_) count += call.registration && call.result == 0;
  return count;
}

size_t RecordingRegistrar::deregistrations() const {
  std::lock_guard<std::mutex> guard(mutex_);
  size_t count = 0;
  for (const Call& call : calls_) count += !call.registration && call.result == 0;
  return count;
}

long RecordingRegistrar::live() const {
  return static_cast<long>(registrations()) - static_cast<long>(deregistrations());
}

void RecordingRegistrar::clear() {
  std::lock_guard<std::mutex> guard(mutex_);
  calls_.clear();
}

}  // namespace nnf::test
