// One engine's side of the rma mode on this rank: its window and the loops that issue, test and
// verify one-sided operations (put and get with a window in flight, put-signal latency).
//
// Window layout, the same on every rank: the signal words (rma_engine.h), then per peer a source
// region (what this rank puts to that peer, or what that peer gets from here), then per peer a
// landing region (what that peer puts here, or what this rank gets from it). A region holds up to
// --window message slots, fewer for large messages and many ranks (kRegionBudget). With 2 ranks
// rank 0 issues and rank 1 is the target; with more every rank issues to every other at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "options.h"
#include "patterns.h"
#include "rma_engine.h"

namespace nnf::perf {

class RmaRunner {
 public:
  RmaRunner(RmaEngine& engine, Bootstrap& boot, const Options& opts)
      : e_(engine), boot_(boot), opts_(opts) {}
  ~RmaRunner() { release(); }
  RmaRunner(const RmaRunner&) = delete;
  RmaRunner& operator=(const RmaRunner&) = delete;

  // Allocates and registers the window (collective).
  bool setup();
  // Measures one size; every rank calls it. Rank 0's row is the result.
  bool step(size_t bytes, Row* row);
  // Deregisters and frees the window.
  void release();
  const std::string& error() const { return error_; }

 private:
  bool fail(const std::string& text) {
    if (error_.empty()) error_ = text;
    return false;
  }
  bool engineFail() { return fail(std::string(e_.name()) + ": " + e_.error()); }

  size_t srcOff(int peer, int slot) const;
  size_t dstOff(int peer, int slot) const;
  // Whom this rank issues to, and who issues to it (bandwidth: 2 ranks, rank 0 to rank 1).
  bool targets(int peer) const {
    return peer != boot_.rank() && (boot_.size() > 2 || (boot_.rank() == 0 && peer == 1));
  }
  bool sources(int peer) const {
    return peer != boot_.rank() && (boot_.size() > 2 || (boot_.rank() == 1 && peer == 0));
  }
  void fill(int from, int to, int slot, size_t bytes, uint64_t round, char* data, bool full) const;
  bool verify(int from, int to, int slot, size_t bytes, uint64_t round, const char* data,
              bool full);

  bool prepare(size_t bytes);
  bool runWindowed(size_t bytes, long count);
  bool endPhase();
  bool waitSignals();  // until every source's count reaches expected_
  bool waitRequest(void* request);
  bool issue(bool signal, int peer, int slot, size_t bytes, void** request);
  bool agreeCount(long warmed, double warmSeconds, long* count);
  // No progress this time: yields now and then; false once `what` has waited too long.
  bool idle(std::chrono::steady_clock::time_point since, const char* what);

  bool stepBandwidth(size_t bytes, Row* row);
  bool stepLatency(size_t bytes, Row* row);

  RmaEngine& e_;
  Bootstrap& boot_;
  const Options& opts_;
  char* base_ = nullptr;
  size_t windowBytes_ = 0, region_ = 0, signalBytes_ = 0;
  size_t stride_ = 0;
  int slots_ = 1;
  bool registered_ = false;
  std::vector<uint64_t> expected_;  // signals from each peer counted so far
  uint64_t round_ = 0;              // latency iterations so far, for the patterns
  unsigned spins_ = 0;
  std::string error_;
};

}  // namespace nnf::perf
