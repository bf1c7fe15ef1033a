// The benchmark patterns, written once against Engine so that the plugin and the raw baseline
// run exactly the same sequence of operations.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "engine.h"
#include "options.h"

namespace nnf::perf {

// One measured point. Rank 0 fills it; fields a mode does not measure stay 0.
struct Row {
  size_t bytes = 0;   // message size (alltoall: the base size, peers get 0..2x of it)
  int comms = 1;      // comms used at once (msgrate)
  long count = 0;     // iterations: messages per comm, round trips, or all-to-all steps
  double timeUs = 0;  // per message (bw, bibw, msgrate), per half round trip (lat, median),
                      // per step (alltoall)
  double gbps = 0;    // GB/s (10^9 bytes per second); bibw both directions together
  double mmsgs = 0;   // million messages per second (msgrate)
  double p99Us = 0;   // lat: 99th percentile of the half round trip
  int window = 0;     // messages in flight per comm
};

// Comms each rank needs to each peer for this mode.
int commsFor(const Options& opts);

// Runs the whole size sweep on every (connected) engine, the engines taking turns at each
// point. Every rank calls it; (*rows)[engine] is filled on rank 0. Returns false (with *error)
// on a transport error, a timeout or corrupt data.
bool runPatterns(const std::vector<Engine*>& engines, Bootstrap& boot, const Options& opts,
                 std::vector<std::vector<Row>>* rows, std::string* error);

// The size rank `from` sends to rank `to` in alltoall: uneven, 0..2x base, as in MoE dispatch
// where experts get different token counts (zero included).
size_t alltoallBytes(int from, int to, size_t base);

}  // namespace nnf::perf
