#include "core/scratch_area.h"

#include <sys/mman.h>

#include <algorithm>

namespace nnf::core {
namespace {
// Landings above this size give their scratch pages back.
constexpr size_t kReleaseAbove = size_t{1} << 20;
}  // namespace

ScratchArea::ScratchArea(size_t bytes, bool backed) : backed_(backed) {
  for (size_t size = bytes; size >= kReleaseAbove && data_ == nullptr; size /= 2) {
    void* area = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | (backed ? 0 : MAP_NORESERVE), -1, 0);
    if (area == MAP_FAILED) continue;
    data_ = static_cast<uint8_t*>(area);
    size_ = size;
  }
}

ScratchArea::~ScratchArea() {
  if (data_ != nullptr) munmap(data_, size_);
}

void ScratchArea::landed(size_t length) {
  // Registered pages stay pinned whatever madvise says: only an unregistered area gives back.
  if (data_ != nullptr && !backed_ && length > kReleaseAbove) {
    madvise(data_, std::min(length, size_), MADV_DONTNEED);
  }
}

}  // namespace nnf::core
