// One engine's side of the benchmark patterns (patterns.h): its streams and buffers, and the
// loops that post, test and verify their messages. runner.cc: set-up, latency and all-to-all;
// runner_streams.cc: the streaming modes (bursts, --order rounds, acknowledgements).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "buffers.h"
#include "engine.h"
#include "options.h"
#include "patterns.h"
#include "timeline.h"

namespace nnf::perf {

using Clock = std::chrono::steady_clock;

// Buffer memory per stream: the window shrinks for the largest messages rather than the
// benchmark eating the memory of a shared machine (16 MiB messages: 16 in flight).
constexpr size_t kStreamBudget = size_t{256} << 20;
constexpr int kStallSeconds = 30;
constexpr size_t kAckSent = 8;
constexpr size_t kAckPosted = 64;     // larger than the send: exercises "receive > send"
constexpr long kBurstMessages = 768;  // messages over all streams between two drains

inline double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Stream {
  Dir dir;
  int peer;
  int index;
  int salt;  // the sender's identity in the pattern
  char* base = nullptr;
  size_t capacity = 0;  // bytes allocated and registered
  size_t stride = 0;    // per size: one message slot, 64-byte aligned
  int slots = 0;        // per size: how many messages fit, at most the window
  void* mh = nullptr;
  std::vector<void*> reqs;
  size_t bytes = 0;
  int window = 1;
  uint64_t postSeq = 0, doneSeq = 0;  // message numbers on this link, alike on both sides
  long toPost = 0, posted = 0;

  char* slot(uint64_t seq) const { return base + (seq % slots) * stride; }
  long inflight() const { return static_cast<long>(postSeq - doneSeq); }
};

struct Ack {
  int peer;
  char* sendBuf = nullptr;
  char* recvBuf = nullptr;
  void* sendMh = nullptr;
  void* recvMh = nullptr;
};

// Runs the patterns of one engine on this rank.
class Runner {
 public:
  Runner(Engine& engine, int engineIndex, Bootstrap& boot, const Options& opts, Buffers& buffers)
      : e_(engine), engineIndex_(engineIndex), boot_(boot), opts_(opts), buffers_(buffers) {}
  ~Runner() { release(); }

  // Allocates and registers the buffers of the mode.
  bool setup();
  // Measures one point; every rank calls it.
  bool step(size_t bytes, int comms, Row* row);
  const std::string& error() const { return error_; }

 private:
  bool addStream(Dir dir, int peer, int index, size_t maxBytes);
  bool addAck(int peer);
  void release();
  bool fail(const std::string& text) {
    if (error_.empty()) error_ = text;
    return false;
  }
  bool engineFail() { return fail(std::string(e_.name()) + ": " + e_.error()); }

  void prepare(Stream& s, size_t bytes);
  bool post(Stream& s, bool* posted);
  bool poll(Stream& s, bool* completed);
  bool verify(const Stream& s, uint64_t seq, size_t got);
  bool runStreams(const std::vector<Stream*>& streams, long n);
  bool runBursts(const std::vector<Stream*>& streams, long n);
  bool runRounds(const std::vector<Stream*>& streams, long n);
  bool prePost(const std::vector<Stream*>& streams, long count, int patience,
               const std::function<bool()>& progress);
  bool testAck(void*& request, uint8_t* done, bool received);
  // `next`: receives of every receiving stream in `streams` posted after the peer's
  // acknowledgement is posted for and before ours goes (--order ahead).
  bool syncAcks(const std::vector<Stream*>* streams = nullptr, long next = 0);
  bool stalled(Clock::time_point since, const char* what);
  bool agreeCount(size_t bytes, long warmed, double warmSeconds, long* count);

  bool stepStreaming(size_t bytes, int comms, Row* row);
  bool stepLatency(size_t bytes, Row* row);
  bool stepAlltoall(size_t bytes, Row* row);

  Engine& e_;
  int engineIndex_;
  Bootstrap& boot_;
  const Options& opts_;
  Buffers& buffers_;
  std::vector<Stream> streams_;
  std::vector<Ack> acks_;
  std::string error_;
  unsigned idleSpins_ = 0;
  std::unique_ptr<Timeline> timeline_;  // --timeline
  // --phases: the measured rounds' time in runStreams and in syncAcks (runRounds).
  struct Phases {
    double streamS = 0, ackS = 0;
    long rounds = 0;
  } phases_;
  void printPhases(size_t bytes) const;
};

}  // namespace nnf::perf
