#include "patterns.h"

#include <unistd.h>

#include <cstdio>
#include <memory>

#include "buffers.h"
#include "runner.h"

namespace nnf::perf {
namespace {

// Keeps the better of two measurements of the same point: in every mode, the shorter time.
void keepBest(const Row& fresh, Row* best) {
  if (best->count == 0 || fresh.timeUs < best->timeUs) *best = fresh;
}

}  // namespace

int commsFor(const Options& opts) {
  return opts.mode == Mode::kMsgrate ? opts.comms : 1;
}

size_t alltoallBytes(int from, int to, size_t base) {
  return base * static_cast<size_t>((from * 3 + to + 1) % 5) / 2;
}

bool runPatterns(const std::vector<Engine*>& engines, Bootstrap& boot, const Options& opts,
                 std::vector<std::vector<Row>>* rows, std::string* error) {
  Buffers buffers;  // outlives the runners, which deregister it
  std::vector<std::unique_ptr<Runner>> runners;
  for (Engine* engine : engines) {
    runners.push_back(
        std::make_unique<Runner>(*engine, static_cast<int>(runners.size()), boot, opts, buffers));
    if (!runners.back()->setup()) {
      *error = runners.back()->error();
      return false;
    }
  }
  std::vector<int> commCounts{1};
  if (opts.mode == Mode::kMsgrate) {
    commCounts.clear();
    for (int c = 1; c < opts.comms; c *= 2) commCounts.push_back(c);
    commCounts.push_back(opts.comms);
  }
  std::vector<size_t> sizes = sweepSizes(opts);
  rows->assign(engines.size(), std::vector<Row>());
  bool progress = boot.rank() == 0 && !opts.quiet && isatty(STDERR_FILENO);
  size_t point = 0, points = sizes.size() * commCounts.size();
  for (size_t bytes : sizes) {
    for (int comms : commCounts) {
      if (progress)
        std::fprintf(stderr, "\r%s: %zu/%zu (%zu bytes, %d comm%s)        ", modeName(opts.mode),
                     ++point, points, bytes, comms, comms > 1 ? "s" : "");
      std::vector<Row> best(engines.size());
      // Engines take turns point by point, and round by round with --repeat in alternating
      // order (plugin, raw, raw, plugin, ...), so that load drifting on a shared machine and
      // whatever the first engine leaves behind (caches, a descheduled peer) hit them alike.
      for (int round = 0; round < opts.repeat; ++round) {
        for (size_t turn = 0; turn < engines.size(); ++turn) {
          size_t e = round % 2 == 0 ? turn : engines.size() - 1 - turn;
          Row row;
          if (!runners[e]->step(bytes, comms, &row)) {
            if (progress) std::fprintf(stderr, "\n");
            *error = runners[e]->error();
            return false;
          }
          keepBest(row, &best[e]);
        }
      }
      for (size_t e = 0; e < engines.size(); ++e) (*rows)[e].push_back(best[e]);
    }
  }
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  for (auto& runner : runners) {
    runner.reset();  // deregisters
  }
  return true;
}

}  // namespace nnf::perf
