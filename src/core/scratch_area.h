// Address space for bytes nobody keeps: the messages drained for closed comms, and the part of a
// message beyond its receive buffer where the provider must never see a truncated receive (see
// platform::receivesNeedOverflowRoom). Reserved without backing (MAP_NORESERVE): pages appear
// where bytes land and are handed back after large landings, so the area costs address space,
// not memory. Shared by every receive of the device at once: its contents are garbage.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nnf::core {

class ScratchArea {
 public:
  // Reserves up to `bytes` (halving until the kernel agrees, at least 1 MiB); empty when not even
  // that can be had. `backed`: ordinary memory, for an area to be registered with the provider
  // (registration pins it: it must be small).
  explicit ScratchArea(size_t bytes, bool backed = false);
  ~ScratchArea();
  ScratchArea(const ScratchArea&) = delete;
  ScratchArea& operator=(const ScratchArea&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }
  // The registration's descriptor where the provider needs one (null: none).
  void* desc() const { return desc_; }
  void setDesc(void* desc) { desc_ = desc; }
  // `length` bytes landed at the start: large landings give their pages back.
  void landed(size_t length);

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool backed_ = false;
  void* desc_ = nullptr;
};

}  // namespace nnf::core
