// The message buffers of a run (one object: Buffers).
#pragma once

#include <cstddef>
#include <map>
#include <tuple>

#include "engine.h"

namespace nnf::perf {

// The message buffers, shared by the engines: they take turns, never overlap, and so measure
// on the very same pages. Separate buffers made whichever engine allocated first up to 12 %
// slower at 4 MiB on shm (physical placement of the pages; swapping the order of allocation
// swapped the result), which is noise that a ratio must not carry.
class Buffers {
 public:
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers();
  // The buffer of one link, `bytes` long, allocated and touched on first use; nullptr when out of
  // memory.
  char* get(Dir dir, int peer, int index, size_t bytes);

 private:
  struct Block {
    char* base;
    size_t bytes;
  };
  std::map<std::tuple<bool, int, int>, Block> memory_;
};

}  // namespace nnf::perf
