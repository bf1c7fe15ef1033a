// --timeline MS: the bytes one engine's messages moved, per interval of MS milliseconds, printed
// to stderr as they end, so that a long run shows its bandwidth over time (a link that goes down
// and comes back: before, during, after). One line per direction the rank moves data in:
//   timeline,<engine>,<rank>,<send|recv>,<t_s>,<interval_s>,<bytes>,<GB/s>
// t_s: seconds since the tool started at the interval's end; bytes: messages completed in it
// (warm-up included; the acknowledgements that end each burst are not counted).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "patterns.h"

namespace nnf::perf {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // `periodMs` > 0. Time zero of the t_s column is the tool's start.
  Timeline(int periodMs, std::string engine, int rank);

  // A message of `bytes` completed in direction `dir`.
  void add(Dir dir, size_t bytes) {
    (dir == Dir::kSend ? sent_ : received_) += bytes;
    (dir == Dir::kSend ? sends_ : receives_) = true;
    tick();
  }
  // Prints the intervals that ended by now, with nothing moved in those where nothing did.
  void tick() {
    if (Clock::now() >= intervalEnd_) printDue();
  }
  // Prints the interval under way (at the end of a measurement).
  void flush();

  // The header line, printed once per process before the first interval.
  static const char* header();

 private:
  void printDue();
  void print(Clock::time_point end);

  Clock::duration period_;
  std::string engine_;
  int rank_;
  Clock::time_point intervalStart_, intervalEnd_;
  uint64_t sent_ = 0, received_ = 0;
  bool sends_ = false, receives_ = false;  // directions this rank moved data in so far
};

}  // namespace nnf::perf
