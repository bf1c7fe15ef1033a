#include "buffers.h"

#include <cstdlib>
#include <cstring>

namespace nnf::perf {

Buffers::~Buffers() {
  for (auto& entry : memory_) std::free(entry.second.base);
}

char* Buffers::get(Dir dir, int peer, int index, size_t bytes) {
  auto key = std::make_tuple(dir == Dir::kSend, peer, index);
  auto it = memory_.find(key);
  if (it != memory_.end()) return it->second.bytes >= bytes ? it->second.base : nullptr;
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, bytes) != 0) return nullptr;
  // Touch every page now, so page faults are not part of any measurement.
  std::memset(mem, 0, bytes);
  memory_[key] = {static_cast<char*>(mem), bytes};
  return static_cast<char*>(mem);
}

}  // namespace nnf::perf
