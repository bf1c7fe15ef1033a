#include "rma_runner.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace nnf::perf {
namespace {

using Clock = std::chrono::steady_clock;

// The regions of all peers in one direction, unless the messages need more (one slot per peer,
// two for latency): 2 ranks at 16 MiB get two slots, 8 ranks one each (224 MiB of window per
// rank in all).
constexpr size_t kRegionBudget = size_t{32} << 20;
constexpr int kStallSeconds = 30;

size_t roundUp(size_t value, size_t to) {
  return (value + to - 1) / to * to;
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The byte at `i` of a message from `from` to `to` in `slot` at `round`: differs between
// messages, sizes and rounds, so that a stale or misplaced byte shows.
uint8_t patternByte(uint64_t salt, size_t i) {
  uint64_t x = (static_cast<uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ULL ^ salt;
  return static_cast<uint8_t>((x >> 56) ^ (x >> 29) ^ i);
}

uint64_t saltOf(int from, int to, int slot, size_t bytes, uint64_t round) {
  return (static_cast<uint64_t>(from) << 56) ^ (static_cast<uint64_t>(to) << 48) ^
         (static_cast<uint64_t>(slot) << 40) ^ (bytes * 0x100000001b3ULL) ^ (round << 20);
}

}  // namespace

bool RmaRunner::setup() {
  int n = boot_.size();
  signalBytes_ = roundUp(static_cast<size_t>(n) * kSignalStride, 4096);
  size_t maxStride = roundUp(std::max<size_t>(opts_.maxBytes, 1), 64);
  // Latency alternates between two slots (stepLatency).
  size_t least = maxStride * (opts_.latency() ? 2 : 1);
  size_t wanted = maxStride * static_cast<size_t>(opts_.window);
  size_t budget = kRegionBudget / static_cast<size_t>(n - 1);
  region_ = roundUp(std::max(least, std::min(wanted, budget)), 4096);
  windowBytes_ = signalBytes_ + 2 * static_cast<size_t>(n) * region_;
  base_ = static_cast<char*>(std::aligned_alloc(4096, windowBytes_));
  if (base_ == nullptr)
    return fail("out of memory for a window of " + std::to_string(windowBytes_));
  std::memset(base_, 0, signalBytes_);
  if (!e_.regWindow(boot_, base_, windowBytes_)) return engineFail();
  registered_ = true;
  expected_.assign(n, 0);
  return true;
}

void RmaRunner::release() {
  if (registered_ && !e_.deregWindow()) engineFail();
  registered_ = false;
  std::free(base_);
  base_ = nullptr;
}

size_t RmaRunner::srcOff(int peer, int slot) const {
  return signalBytes_ + static_cast<size_t>(peer) * region_ + static_cast<size_t>(slot) * stride_;
}

size_t RmaRunner::dstOff(int peer, int slot) const {
  return signalBytes_ + static_cast<size_t>(boot_.size() + peer) * region_ +
         static_cast<size_t>(slot) * stride_;
}

void RmaRunner::fill(int from, int to, int slot, size_t bytes, uint64_t round, char* data,
                     bool full) const {
  uint64_t salt = saltOf(from, to, slot, bytes, round);
  if (full) {
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(patternByte(salt, i));
  } else if (bytes > 0) {
    data[0] = static_cast<char>(patternByte(salt, 0));
    data[bytes - 1] = static_cast<char>(patternByte(salt, bytes - 1));
  }
}

bool RmaRunner::verify(int from, int to, int slot, size_t bytes, uint64_t round, const char* data,
                       bool full) {
  uint64_t salt = saltOf(from, to, slot, bytes, round);
  for (size_t i = 0; i < bytes; i = full || i + 1 == bytes ? i + 1 : bytes - 1) {
    auto want = static_cast<char>(patternByte(salt, i));
    if (data[i] != want)
      return fail(std::string(e_.name()) + ": rma " + rmaOpName(opts_.rmaOp) + " " +
                  std::to_string(bytes) + " bytes from rank " + std::to_string(from) + " to rank " +
                  std::to_string(to) + ", slot " + std::to_string(slot) + ": byte " +
                  std::to_string(i) + " is " + std::to_string(static_cast<uint8_t>(data[i])) +
                  ", expected " + std::to_string(static_cast<uint8_t>(want)));
  }
  return true;
}

bool RmaRunner::idle(Clock::time_point since, const char* what) {
  if (++spins_ % 64 == 0) sched_yield();
  if (spins_ % 1024 != 0 || Clock::now() - since < std::chrono::seconds(kStallSeconds)) return true;
  return fail(std::string(e_.name()) + ": rma " + rmaOpName(opts_.rmaOp) + ": " + what + " for " +
              std::to_string(kStallSeconds) + " s");
}

bool RmaRunner::issue(bool signal, int peer, int slot, size_t bytes, void** request) {
  int me = boot_.rank();
  *request = nullptr;
  bool ok = opts_.rmaOp == RmaOp::kGet && !signal
                ? e_.get(peer, srcOff(me, slot), dstOff(peer, slot), bytes, request)
            : signal ? e_.putSignal(peer, srcOff(peer, slot), dstOff(me, slot), bytes, request)
                     : e_.put(peer, srcOff(peer, slot), dstOff(me, slot), bytes, request);
  return ok || engineFail();
}

bool RmaRunner::waitRequest(void* request) {
  Clock::time_point since = Clock::now();
  for (;;) {
    int done = 0;
    if (!e_.test(request, &done)) return engineFail();
    if (done) return true;
    if (!idle(since, "a request stayed unfinished")) return false;
  }
}

bool RmaRunner::waitSignals() {
  Clock::time_point since = Clock::now();
  for (int peer = 0; peer < boot_.size(); ++peer) {
    if (peer == boot_.rank()) continue;
    for (;;) {
      uint64_t count = 0;
      if (!e_.signals(peer, &count)) return engineFail();
      if (count >= expected_[peer]) break;
      if (!idle(since, ("no signal " + std::to_string(expected_[peer]) + " from rank " +
                        std::to_string(peer))
                           .c_str()))
        return false;
    }
  }
  return true;
}

bool RmaRunner::prepare(size_t bytes) {
  stride_ = roundUp(std::max<size_t>(bytes, 1), 64);
  // Latency alternates between two slots whatever the window (setup made room for them).
  int most = opts_.latency() ? 2 : opts_.window;
  slots_ = static_cast<int>(std::min<size_t>(most, region_ / stride_));
  int me = boot_.rank();
  for (int peer = 0; peer < boot_.size(); ++peer) {
    if (peer == me) continue;
    for (int slot = 0; slot < slots_; ++slot)
      fill(me, peer, slot, bytes, 0, base_ + srcOff(peer, slot), true);
    std::memset(base_ + dstOff(peer, 0), 0, static_cast<size_t>(slots_) * stride_);
  }
  return boot_.barrier() || fail(boot_.error());
}

// `count` operations to every target, --window of them in flight per target, tested oldest first.
bool RmaRunner::runWindowed(size_t bytes, long count) {
  struct Link {
    int peer;
    long posted = 0, done = 0;
    std::vector<void*> ring;
  };
  std::vector<Link> links;
  for (int peer = 0; peer < boot_.size(); ++peer)
    if (targets(peer)) links.push_back({peer, 0, 0, std::vector<void*>(opts_.window, nullptr)});
  Clock::time_point since = Clock::now();
  for (;;) {
    bool moved = false, finished = true;
    for (Link& link : links) {
      while (link.posted - link.done < opts_.window && link.posted < count) {
        void* request = nullptr;
        if (!issue(false, link.peer, static_cast<int>(link.posted % slots_), bytes, &request))
          return false;
        if (request == nullptr) break;
        link.ring[link.posted++ % opts_.window] = request;
        moved = true;
      }
      while (link.done < link.posted) {
        int done = 0;
        if (!e_.test(link.ring[link.done % opts_.window], &done)) return engineFail();
        if (!done) break;
        ++link.done;
        moved = true;
      }
      finished = finished && link.done == count;
    }
    if (finished) return true;
    if (moved) since = Clock::now(), spins_ = 0;
    if (!moved && !idle(since, "operations stayed unfinished")) return false;
  }
}

// Ends a phase: a zero-byte put-signal to every target, after its operations completed; then
// waits for the same from every source, so that the targets progress until the issuers are done.
bool RmaRunner::endPhase() {
  std::vector<void*> requests;
  for (int peer = 0; peer < boot_.size(); ++peer) {
    if (sources(peer)) ++expected_[peer];
    if (!targets(peer)) continue;
    void* request = nullptr;
    Clock::time_point since = Clock::now();
    while (request == nullptr) {
      if (!issue(true, peer, 0, 0, &request)) return false;
      if (request == nullptr && !idle(since, "a signal found no room")) return false;
    }
    requests.push_back(request);
  }
  for (void* request : requests)
    if (!waitRequest(request)) return false;
  return waitSignals();
}

bool RmaRunner::agreeCount(long warmed, double warmSeconds, long* count) {
  if (opts_.iters > 0) {
    *count = opts_.iters;
    return true;
  }
  if (boot_.rank() == 0) {
    double perOp = warmed > 0 ? warmSeconds / static_cast<double>(warmed) : 0;
    double wanted = perOp > 0 ? opts_.timeMs / 1000.0 / perOp : 4.0 * opts_.window;
    *count = static_cast<long>(std::min(1e7, std::max<double>(opts_.window, wanted)));
    for (int peer = 1; peer < boot_.size(); ++peer)
      if (!boot_.send(peer, count, sizeof(*count))) return fail(boot_.error());
    return true;
  }
  return boot_.recv(0, count, sizeof(*count)) || fail(boot_.error());
}

bool RmaRunner::stepBandwidth(size_t bytes, Row* row) {
  if (!prepare(bytes)) return false;
  long warm = std::max<long>(warmupFor(opts_, bytes), opts_.window);
  Clock::time_point start = Clock::now();
  if (!runWindowed(bytes, warm) || !endPhase()) return false;
  double warmSeconds = seconds(Clock::now() - start);
  long count = 0;
  if (!agreeCount(warm, warmSeconds, &count)) return false;
  if (!boot_.barrier()) return fail(boot_.error());
  start = Clock::now();
  if (!runWindowed(bytes, count) || !endPhase()) return false;
  double elapsed = seconds(Clock::now() - start);
  if (!boot_.barrier()) return fail(boot_.error());
  // Every slot of every link that carried data to this rank (put) or from it (get).
  int me = boot_.rank();
  int used = static_cast<int>(std::min<long>(slots_, count));
  for (int peer = 0; peer < boot_.size(); ++peer) {
    bool mine = opts_.rmaOp == RmaOp::kGet ? targets(peer) : sources(peer);
    for (int slot = 0; mine && slot < used; ++slot)
      if (!verify(peer, me, slot, bytes, 0, base_ + dstOff(peer, slot), opts_.fullCheck))
        return false;
  }
  long ops = 0;
  for (int peer = 0; peer < boot_.size(); ++peer) ops += targets(peer) ? count : 0;
  row->bytes = bytes;
  row->comms = boot_.size();
  row->count = count;
  row->window = opts_.window;
  row->timeUs = ops > 0 ? elapsed * 1e6 / static_cast<double>(ops) : 0;
  row->gbps = elapsed > 0 ? static_cast<double>(bytes) * ops / elapsed / 1e9 : 0;
  row->mmsgs = elapsed > 0 ? ops / elapsed / 1e6 : 0;
  return true;
}

// Put-with-signal latency. 2 ranks: ping-pong, half the round trip, each side waiting on its
// signal from the other before it answers. More: every rank puts to every other and waits for
// the signals of all; the time of one such step.
bool RmaRunner::stepLatency(size_t bytes, Row* row) {
  if (!prepare(bytes)) return false;
  int me = boot_.rank(), n = boot_.size();
  long iters = itersFor(opts_, bytes), warm = warmupFor(opts_, bytes);
  std::vector<double> times;
  times.reserve(static_cast<size_t>(iters));
  std::vector<void*> requests;
  auto send = [&](int peer, int slot) {
    fill(me, peer, slot, bytes, round_, base_ + srcOff(peer, slot), opts_.fullCheck);
    void* request = nullptr;
    Clock::time_point since = Clock::now();
    while (request == nullptr) {
      if (!issue(true, peer, slot, bytes, &request)) return false;
      if (request == nullptr && !idle(since, "a put-signal found no room")) return false;
    }
    requests.push_back(request);
    return true;
  };
  auto receive = [&](int slot) {
    for (int peer = 0; peer < n; ++peer)
      if (peer != me && (n > 2 || peer == 1 - me)) ++expected_[peer];
    if (!waitSignals()) return false;
    for (int peer = 0; peer < n; ++peer)
      if (peer != me &&
          !verify(peer, me, slot, bytes, round_, base_ + dstOff(peer, slot), opts_.fullCheck))
        return false;
    return true;
  };
  auto drain = [&]() {
    for (void* request : requests)
      if (!waitRequest(request)) return false;
    requests.clear();
    return true;
  };
  if (!boot_.barrier()) return fail(boot_.error());
  for (long i = 0; i < warm + iters; ++i, ++round_) {
    int slot = static_cast<int>(round_ % 2);
    Clock::time_point start = Clock::now();
    bool ok;
    if (n == 2 && me == 1) {
      ok = receive(slot) && send(0, slot) && drain();
    } else {
      ok = true;
      for (int peer = 0; ok && peer < n; ++peer)
        if (peer != me) ok = send(peer, slot);
      ok = ok && receive(slot) && drain();
    }
    if (!ok) return false;
    double us = seconds(Clock::now() - start) * 1e6;
    if (i >= warm) times.push_back(n == 2 ? us / 2 : us);
  }
  if (!boot_.barrier()) return fail(boot_.error());
  std::sort(times.begin(), times.end());
  row->bytes = bytes;
  row->comms = n;
  row->count = iters;
  row->window = 1;
  if (!times.empty()) {
    row->timeUs = times[times.size() / 2];
    row->p99Us = times[std::min(times.size() - 1, times.size() * 99 / 100)];
  }
  row->gbps = row->timeUs > 0 ? static_cast<double>(bytes) / (row->timeUs * 1e3) : 0;
  row->mmsgs = row->timeUs > 0 ? 1.0 / row->timeUs : 0;
  return true;
}

bool RmaRunner::step(size_t bytes, Row* row) {
  return opts_.rmaOp == RmaOp::kPutSignal ? stepLatency(bytes, row) : stepBandwidth(bytes, row);
}

}  // namespace nnf::perf
