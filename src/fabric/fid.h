// RAII ownership of libfabric objects: every fid_* the plugin opens is held by one of these and
// closed exactly once, in reverse order of opening (members are destroyed in reverse).
#pragma once

#include <rdma/fabric.h>

#include <string>
#include <utility>

namespace nnf::fabric {

// Text for a libfabric error code (positive or negative).
inline std::string errorText(int code) {
  return fi_strerror(code < 0 ? -code : code);
}

template <typename T>
class Fid {
 public:
  Fid() = default;
  explicit Fid(T* fid) : fid_(fid) {}
  ~Fid() { reset(); }
  Fid(Fid&& other) noexcept : fid_(std::exchange(other.fid_, nullptr)) {}
  Fid& operator=(Fid&& other) noexcept {
    if (this != &other) {
      reset();
      fid_ = std::exchange(other.fid_, nullptr);
    }
    return *this;
  }
  Fid(const Fid&) = delete;
  Fid& operator=(const Fid&) = delete;

  T* get() const { return fid_; }
  T* operator->() const { return fid_; }
  T** out() {
    reset();
    return &fid_;
  }
  explicit operator bool() const { return fid_ != nullptr; }

  // Closing can fail (e.g. -FI_EBUSY while objects are still bound); nothing useful can be done
  // about it at that point, so the result is returned for callers that want to log it.
  int reset() {
    int ret = 0;
    if (fid_ != nullptr) ret = fi_close(&fid_->fid);
    fid_ = nullptr;
    return ret;
  }

 private:
  T* fid_ = nullptr;
};

// fi_info lists are freed with fi_freeinfo rather than fi_close.
class InfoPtr {
 public:
  InfoPtr() = default;
  explicit InfoPtr(fi_info* info) : info_(info) {}
  ~InfoPtr() { reset(); }
  InfoPtr(InfoPtr&& other) noexcept : info_(std::exchange(other.info_, nullptr)) {}
  InfoPtr& operator=(InfoPtr&& other) noexcept {
    if (this != &other) {
      reset();
      info_ = std::exchange(other.info_, nullptr);
    }
    return *this;
  }
  InfoPtr(const InfoPtr&) = delete;
  InfoPtr& operator=(const InfoPtr&) = delete;

  fi_info* get() const { return info_; }
  fi_info* operator->() const { return info_; }
  fi_info** out() {
    reset();
    return &info_;
  }
  explicit operator bool() const { return info_ != nullptr; }
  void reset() {
    if (info_ != nullptr) fi_freeinfo(info_);
    info_ = nullptr;
  }

 private:
  fi_info* info_ = nullptr;
};

}  // namespace nnf::fabric
