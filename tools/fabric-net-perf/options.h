// Command line of fabric-net-perf.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace nnf::perf {

enum class Mode { kBw, kBibw, kLat, kMsgrate, kAlltoall, kComms, kRma };

const char* modeName(Mode mode);

// rma: the one-sided operation measured (rma_runner.h).
enum class RmaOp { kPut, kPutSignal, kGet };

const char* rmaOpName(RmaOp op);

// --order: when the receiver posts its receives relative to the sender's sends, round by round
// (bw, msgrate). kFree: no rounds, bursts of kBurstMessages as without the option.
enum class Order { kFree, kAhead, kStep, kBehind };

const char* orderName(Order order);

struct Options {
  Mode mode = Mode::kBw;
  RmaOp rmaOp = RmaOp::kPut;  // rma
  size_t minBytes = 0;        // 0 with minSet=false: the mode's default
  size_t maxBytes = 0;
  double factor = 0;
  int iters = 0;     // 0: sized from the warm-up so that a measurement lasts timeMs
  int warmup = -1;   // -1: chosen per size
  int timeMs = 100;  // target length of one measurement when iters is 0 (not lat)
  bool minSet = false, maxSet = false;
  int repeat = 1;   // rounds per point; the best one is kept
  int window = 32;  // messages in flight per comm (NCCL_NET_MAX_REQUESTS)
  int comms = 4;    // msgrate: largest number of comms used at once; comms: comms open at once
  int ranks = 4;    // alltoall, rma: size of the local group (rma: default 2)
  int dev = 0;
  std::string provider;
  bool runPlugin = true;
  bool runRaw = true;
  bool rawRma = false;  // --raw rma: the raw engine writes (fi_writedata) instead of tagged sends
  bool fullCheck = false;
  bool quiet = false;
  int load = 0;        // --load N: busy-looping processes beside the ranks (load.h)
  int timelineMs = 0;  // --timeline MS: bytes moved per MS ms on stderr (timeline.h); 0: off
  bool phases = false;  // --phases: each rank's mean time a round spends in its two phases
  Order order = Order::kFree;
  // Local ranks on distinct CPUs (when there are enough): -1 lat only, 0 never, 1 always.
  // Measured on a loaded 2-CPU machine: pinning keeps two spinning ping-pong ranks from being
  // stacked on one CPU, but costs the streaming modes the scheduler's freedom to dodge load.
  int pin = -1;
  bool latency() const {
    return mode == Mode::kLat || (mode == Mode::kRma && rmaOp == RmaOp::kPutSignal);
  }
  bool pinned() const { return pin == 1 || (pin == -1 && latency()); }
  std::string csvPath, jsonPath, plotPath;
  std::string pluginPath;
  // Two hosts: the listening side is rank 0 and prints the results.
  bool listen = false;
  int port = 18515;
  std::string connectHost;

  bool twoHosts() const { return listen || !connectHost.empty(); }
  int numRanks() const {
    return (mode == Mode::kAlltoall || mode == Mode::kRma) && !twoHosts() ? ranks : 2;
  }
};

// Fills *out; on a bad command line returns false with a message in *error.
// Sets *help when -h/--help was given.
bool parseOptions(int argc, char** argv, Options* out, std::string* error, bool* help);
void printUsage(const char* argv0);

// The sizes the sweep visits, minimum to maximum (the maximum always included).
std::vector<size_t> sweepSizes(const Options& opts);

// Iterations and warm-up for one size (the user's -n / -w when given). Without -n, the
// streaming modes and alltoall size their measurement from the warm-up instead (--time).
int itersFor(const Options& opts, size_t bytes);
int warmupFor(const Options& opts, size_t bytes);

// A string of the options that both sides of a two-host run must agree on.
std::string agreementKey(const Options& opts);

}  // namespace nnf::perf
