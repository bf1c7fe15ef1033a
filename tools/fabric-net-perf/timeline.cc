#include "timeline.h"

#include <cstdio>
#include <utility>

namespace nnf::perf {
namespace {

// Time zero of every line: the tool's start (when this file's statics are made), which a
// harness that changes links at chosen seconds after starting the tool can line up with.
const Timeline::Clock::time_point g_started = Timeline::Clock::now();

}  // namespace

Timeline::Timeline(int periodMs, std::string engine, int rank)
    : period_(std::chrono::milliseconds(periodMs)),
      engine_(std::move(engine)),
      rank_(rank),
      intervalStart_(Clock::now()),
      intervalEnd_(intervalStart_ + period_) {
  static bool headerPrinted = false;
  if (!headerPrinted) {
    headerPrinted = true;
    std::fprintf(stderr, "%s\n", header());
  }
}

const char* Timeline::header() {
  return "timeline,engine,rank,dir,t_s,interval_s,bytes,gbps";
}

void Timeline::printDue() {
  // A long stall (a link down) ends several intervals at once: each gets its line.
  auto now = Clock::now();
  while (intervalEnd_ <= now) {
    print(intervalEnd_);
    intervalStart_ = intervalEnd_;
    intervalEnd_ += period_;
  }
}

void Timeline::flush() {
  printDue();
  auto now = Clock::now();
  if (now > intervalStart_ && (sent_ > 0 || received_ > 0)) print(now);
  intervalStart_ = now;
  intervalEnd_ = now + period_;
}

void Timeline::print(Clock::time_point end) {
  double t = std::chrono::duration<double>(end - g_started).count();
  double span = std::chrono::duration<double>(end - intervalStart_).count();
  auto line = [&](const char* dir, uint64_t bytes) {
    std::fprintf(stderr, "timeline,%s,%d,%s,%.3f,%.3f,%llu,%.4f\n", engine_.c_str(), rank_, dir, t,
                 span, static_cast<unsigned long long>(bytes),
                 span > 0 ? static_cast<double>(bytes) / span / 1e9 : 0.0);
  };
  if (sends_) line("send", sent_);
  if (receives_) line("recv", received_);
  std::fflush(stderr);
  sent_ = received_ = 0;
}

}  // namespace nnf::perf
