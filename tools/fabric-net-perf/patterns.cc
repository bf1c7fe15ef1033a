#include "patterns.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

namespace nnf::perf {
namespace {

using Clock = std::chrono::steady_clock;

// Buffer memory per stream: the window shrinks for the largest messages rather than the
// benchmark eating the memory of a shared machine (16 MiB messages: 16 in flight).
constexpr size_t kStreamBudget = size_t{256} << 20;
constexpr int kStallSeconds = 30;
constexpr size_t kAckSent = 8;
constexpr size_t kAckPosted = 64;     // larger than the send: exercises "receive > send"
constexpr long kBurstMessages = 768;  // messages over all streams between two drains

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The pattern: a body that depends on the sender and the offset, and the message number
// stamped over the first and last 8 bytes, so a stale or misplaced message is caught by the
// cheap check too.
uint8_t bodyByte(int salt, size_t k) {
  return static_cast<uint8_t>(salt * 29 + k * 7 + (k >> 9));
}

uint8_t expectedByte(int salt, uint64_t seq, size_t size, size_t k) {
  if (k < 8) return static_cast<uint8_t>((seq >> (8 * k)) ^ salt);
  if (size >= 16 && k >= size - 8) return static_cast<uint8_t>(~(seq >> (8 * (k - (size - 8)))));
  return bodyByte(salt, k);
}

void stamp(char* p, int salt, uint64_t seq, size_t size) {
  for (size_t k = 0; k < std::min<size_t>(8, size); ++k) p[k] = expectedByte(salt, seq, size, k);
  if (size >= 16)
    for (size_t k = size - 8; k < size; ++k) p[k] = expectedByte(salt, seq, size, k);
}

// Engines share the buffers, so the salt tells them apart too: a message one engine failed to
// deliver must not pass the check on the bytes the other engine left in the same slot.
int saltFor(int srcRank, int index, int engine) {
  return (srcRank * 16 + index + 1 + engine * 101) & 0xff;
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

// The message buffers, shared by the engines: they take turns, never overlap, and so measure
// on the very same pages. Separate buffers made whichever engine allocated first up to 12 %
// slower at 4 MiB on shm (physical placement of the pages; swapping the order of allocation
// swapped the result), which is noise that a ratio must not carry.
class Buffers {
 public:
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    for (auto& entry : memory_) std::free(entry.second.base);
  }
  // The buffer of one link, `bytes` long, allocated and touched on first use; nullptr when out of
  // memory.
  char* get(Dir dir, int peer, int index, size_t bytes) {
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

 private:
  struct Block {
    char* base;
    size_t bytes;
  };
  std::map<std::tuple<bool, int, int>, Block> memory_;
};

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
  bool syncAcks();
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
};

bool Runner::addStream(Dir dir, int peer, int index, size_t maxBytes) {
  Stream s;
  s.dir = dir;
  s.peer = peer;
  s.index = index;
  s.salt = saltFor(dir == Dir::kSend ? boot_.rank() : peer, index, engineIndex_);
  size_t maxStride = std::max<size_t>(64, (maxBytes + 63) & ~size_t{63});
  s.capacity = std::min(maxStride * opts_.window, std::max(kStreamBudget, maxStride));
  s.base = buffers_.get(dir, peer, index, s.capacity);
  if (s.base == nullptr)
    return fail("out of memory for " + std::to_string(s.capacity) + " bytes of buffers");
  s.reqs.assign(opts_.window, nullptr);
  streams_.push_back(s);
  if (!e_.regMr(dir, peer, index, s.base, s.capacity, &streams_.back().mh)) {
    streams_.back().mh = nullptr;
    return engineFail();
  }
  return true;
}

bool Runner::addAck(int peer) {
  Ack a;
  a.peer = peer;
  if (posix_memalign(reinterpret_cast<void**>(&a.sendBuf), 64, kAckPosted) != 0 ||
      posix_memalign(reinterpret_cast<void**>(&a.recvBuf), 64, kAckPosted) != 0)
    return fail("out of memory");
  std::memset(a.sendBuf, 0xac, kAckPosted);
  acks_.push_back(a);
  Ack& b = acks_.back();
  if (!e_.regMr(Dir::kSend, peer, 0, b.sendBuf, kAckPosted, &b.sendMh)) return engineFail();
  if (!e_.regMr(Dir::kRecv, peer, 0, b.recvBuf, kAckPosted, &b.recvMh)) return engineFail();
  return true;
}

void Runner::release() {
  for (Stream& s : streams_) {
    if (s.mh != nullptr && !e_.deregMr(s.dir, s.peer, s.index, s.mh)) engineFail();
  }
  streams_.clear();
  for (Ack& a : acks_) {
    if (a.sendMh != nullptr && !e_.deregMr(Dir::kSend, a.peer, 0, a.sendMh)) engineFail();
    if (a.recvMh != nullptr && !e_.deregMr(Dir::kRecv, a.peer, 0, a.recvMh)) engineFail();
    std::free(a.sendBuf);
    std::free(a.recvBuf);
  }
  acks_.clear();
}

void Runner::prepare(Stream& s, size_t bytes) {
  s.bytes = bytes;
  s.stride = std::max<size_t>(64, (bytes + 63) & ~size_t{63});
  s.slots =
      static_cast<int>(std::max<size_t>(1, std::min<size_t>(opts_.window, s.capacity / s.stride)));
  s.window = s.slots;
  // Senders lay the body down once per size; per message only the stamps change.
  if (s.dir == Dir::kSend) {
    for (size_t k = 0; k < bytes; ++k) s.base[k] = bodyByte(s.salt, k);
    for (int i = 1; i < s.slots; ++i) std::memcpy(s.base + i * s.stride, s.base, bytes);
  }
}

bool Runner::post(Stream& s, bool* posted) {
  *posted = false;
  uint64_t seq = s.postSeq;
  char* p = s.slot(seq);
  void* req = nullptr;
  if (s.dir == Dir::kSend) {
    stamp(p, s.salt, seq, s.bytes);
    if (!e_.isend(s.peer, s.index, p, s.bytes, s.mh, &req)) return engineFail();
  } else {
    // The full check must not pass on a previous message's bytes.
    if (opts_.fullCheck) std::memset(p, 0x5c, s.bytes);
    if (!e_.irecv(s.peer, s.index, p, s.bytes, s.mh, &req)) return engineFail();
  }
  if (req == nullptr) return true;  // not now: the caller progresses and retries
  s.reqs[seq % s.slots] = req;
  ++s.postSeq;
  ++s.posted;
  *posted = true;
  return true;
}

bool Runner::verify(const Stream& s, uint64_t seq, size_t got) {
  if (got != s.bytes)
    return fail("size mismatch: message " + std::to_string(seq) + " from rank " +
                std::to_string(s.peer) + " comm " + std::to_string(s.index) + ": received " +
                std::to_string(got) + " bytes, expected " + std::to_string(s.bytes));
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s.slot(seq));
  size_t n = s.bytes;
  auto checkRange = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) {
      uint8_t want = expectedByte(s.salt, seq, n, k);
      if (p[k] != want) {
        char text[256];
        std::snprintf(text, sizeof(text),
                      "data mismatch: message %llu from rank %d comm %d (%zu bytes) at byte %zu: "
                      "got 0x%02x, expected 0x%02x",
                      static_cast<unsigned long long>(seq), s.peer, s.index, n, k, p[k], want);
        return fail(text);
      }
    }
    return true;
  };
  if (opts_.fullCheck) return checkRange(0, n);
  return checkRange(0, std::min<size_t>(n, 16)) && checkRange(n > 16 ? n - 16 : n, n) &&
         checkRange(n / 2, std::min(n, n / 2 + 1));
}

bool Runner::poll(Stream& s, bool* completed) {
  *completed = false;
  if (s.inflight() == 0) return true;
  uint64_t seq = s.doneSeq;
  void*& req = s.reqs[seq % s.slots];
  int done = 0;
  size_t got = 0;
  if (!e_.test(req, &done, &got)) return engineFail();
  if (!done) return true;
  req = nullptr;
  ++s.doneSeq;
  *completed = true;
  return s.dir == Dir::kSend || verify(s, seq, got);
}

bool Runner::stalled(Clock::time_point since, const char* what) {
  // See runStreams. Latency never yields: measured here, any yield turns a microsecond wait
  // into a scheduler time slice whenever the machine has other work.
  if ((++idleSpins_ & 63) == 0 && opts_.mode != Mode::kLat) sched_yield();
  if (Clock::now() - since < std::chrono::seconds(kStallSeconds)) return false;
  fail(std::string(e_.name()) + ": no progress for " + std::to_string(kStallSeconds) + " s while " +
       what + " (is the peer alive?)");
  return true;
}

bool Runner::runStreams(const std::vector<Stream*>& streams, long n) {
  for (Stream* s : streams) s->posted = 0, s->toPost = n;
  auto lastProgress = Clock::now();
  unsigned spins = 0;
  for (;;) {
    bool pending = false, progressed = false;
    for (Stream* s : streams) {
      while (s->posted < s->toPost && s->inflight() < s->window) {
        bool posted = false;
        if (!post(*s, &posted)) return false;
        if (!posted) break;
        progressed = true;
      }
      bool completed = true;
      while (completed) {
        if (!poll(*s, &completed)) return false;
        progressed |= completed;
      }
      pending |= s->posted < s->toPost || s->inflight() > 0;
    }
    if (!pending) return true;
    if (progressed) {
      spins = 0;
    } else if ((++spins & 63) == 0) {
      // More ranks than cores is normal here (alltoall on a laptop, a shared CI box): give
      // the peer the CPU it needs to make the progress we are waiting for.
      sched_yield();
    }
    if (!progressed && (spins & 1023) == 1023) {
      if (spins == 1023)
        lastProgress = Clock::now();
      else if (stalled(lastProgress, "moving data"))
        return false;
    }
  }
}

bool Runner::syncAcks() {
  // Everyone tells its peers "I am done" over the transport itself, so a sender's clock stops
  // only when its data has arrived, not when its buffers were merely handed off.
  std::vector<void*> recvs(acks_.size(), nullptr), sends(acks_.size(), nullptr);
  std::vector<bool> recvDone(acks_.size(), false), sendDone(acks_.size(), false);
  auto since = Clock::now();
  for (;;) {
    bool pending = false;
    for (size_t i = 0; i < acks_.size(); ++i) {
      Ack& a = acks_[i];
      if (!recvDone[i] && recvs[i] == nullptr &&
          !e_.irecv(a.peer, 0, a.recvBuf, kAckPosted, a.recvMh, &recvs[i]))
        return engineFail();
      if (!sendDone[i] && sends[i] == nullptr &&
          !e_.isend(a.peer, 0, a.sendBuf, kAckSent, a.sendMh, &sends[i]))
        return engineFail();
      int done = 0;
      size_t got = 0;
      if (recvs[i] != nullptr) {
        if (!e_.test(recvs[i], &done, &got)) return engineFail();
        if (done) {
          recvs[i] = nullptr;
          recvDone[i] = true;
          if (got != kAckSent)
            return fail("acknowledgement from rank " + std::to_string(a.peer) + " has " +
                        std::to_string(got) + " bytes, expected " + std::to_string(kAckSent));
        }
      }
      if (sends[i] != nullptr) {
        if (!e_.test(sends[i], &done, &got)) return engineFail();
        if (done) sends[i] = nullptr, sendDone[i] = true;
      }
      pending |= !recvDone[i] || !sendDone[i];
    }
    if (!pending) return true;
    if (stalled(since, "waiting for the peer's acknowledgement")) return false;
  }
}

bool Runner::agreeCount(size_t bytes, long warmed, double warmSeconds, long* count) {
  if (opts_.iters > 0) {
    *count = opts_.iters;
    return true;
  }
  // Rank 0 sizes the measurement from its warm-up so that it lasts about --time on any
  // provider (a fixed count is a few scheduler slices on shm and seconds on tcp), and tells
  // the others: every rank must run the same number of iterations.
  long n = itersFor(opts_, bytes);
  if (boot_.rank() == 0) {
    if (warmed > 0 && warmSeconds > 0) {
      double perIteration = warmSeconds / static_cast<double>(warmed);
      n = static_cast<long>(opts_.timeMs * 1e-3 / perIteration);
      // A hiccup in a short warm-up must not shrink the measurement below the fixed count.
      n = std::max<long>(n, itersFor(opts_, bytes));
      n = std::min<long>(n, 100000000);
    }
    for (int peer = 1; peer < boot_.size(); ++peer)
      if (!boot_.send(peer, &n, sizeof(n))) return fail(boot_.error());
  } else if (!boot_.recv(0, &n, sizeof(n))) {
    return fail(boot_.error());
  }
  *count = n;
  return true;
}

bool Runner::runBursts(const std::vector<Stream*>& streams, long n) {
  // Nothing stops a sender of small messages from running ahead of its receiver (an eager
  // send completes at once), and a provider parks what arrives early in a bounded pool: shm
  // fails the next fi_trecv with -FI_ENOMEM once ~1,000 wait there. Long runs therefore go in
  // bursts that each end with the acknowledgement round trip (a drain every few hundred
  // messages: about 1 % of the time at 8 bytes on shm, the same for both engines).
  long burst = std::max<long>(opts_.window, kBurstMessages / static_cast<long>(streams.size()));
  for (long done = 0; done < n;) {
    long chunk = std::min(burst, n - done);
    if (!runStreams(streams, chunk) || !syncAcks()) return false;
    done += chunk;
  }
  return true;
}

bool Runner::stepStreaming(size_t bytes, int comms, Row* row) {
  std::vector<Stream*> active;
  for (Stream& s : streams_) {
    if (s.index >= comms) continue;
    prepare(s, bytes);
    active.push_back(&s);
  }
  long n = 0, w = warmupFor(opts_, bytes);
  auto warm0 = Clock::now();
  if (w > 0 && !runBursts(active, w)) return false;
  if (!agreeCount(bytes, w, seconds(Clock::now() - warm0), &n)) return false;
  if (!boot_.barrier()) return fail(boot_.error());
  auto t0 = Clock::now();
  if (!runBursts(active, n)) return false;
  double elapsed = seconds(Clock::now() - t0);
  bool both = opts_.mode == Mode::kBibw;
  row->bytes = bytes;
  row->comms = comms;
  row->count = n;
  row->window = active.empty() ? 0 : active.front()->window;
  // msgrate: time per message over all comms (1 / rate); otherwise per message of a stream.
  row->timeUs = elapsed * 1e6 / n / (opts_.mode == Mode::kMsgrate ? comms : 1);
  row->gbps = (both ? 2.0 : 1.0) * comms * bytes * n / elapsed / 1e9;
  row->mmsgs = (both ? 2.0 : 1.0) * comms * n / elapsed / 1e6;
  return true;
}

bool Runner::stepLatency(size_t bytes, Row* row) {
  Stream* send = nullptr;
  Stream* recv = nullptr;
  for (Stream& s : streams_) {
    prepare(s, bytes);
    (s.dir == Dir::kSend ? send : recv) = &s;
  }
  long n = itersFor(opts_, bytes), total = n + warmupFor(opts_, bytes);
  std::vector<double> rtt;
  rtt.reserve(n);
  if (!boot_.barrier()) return fail(boot_.error());
  auto since = Clock::now();
  auto postRetry = [&](Stream& s) {
    for (bool posted = false; !posted;) {
      if (!post(s, &posted)) return false;
      if (!posted && stalled(since, "posting")) return false;
    }
    return true;
  };
  auto wait = [&](Stream& s) {
    for (bool completed = false; !completed;) {
      if (!poll(s, &completed)) return false;
      if (!completed && stalled(since, "waiting for the ping-pong")) return false;
    }
    return true;
  };
  // Receives are posted before the matching send can arrive, as NCCL posts them.
  if (boot_.rank() == 1 && !postRetry(*recv)) return false;
  for (long i = 0; i < total; ++i) {
    since = Clock::now();
    if (boot_.rank() == 0) {
      auto t0 = Clock::now();
      if (!postRetry(*recv) || !postRetry(*send) || !wait(*send) || !wait(*recv)) return false;
      if (i >= total - n) rtt.push_back(seconds(Clock::now() - t0));
    } else {
      if (!wait(*recv)) return false;
      if (i + 1 < total && !postRetry(*recv)) return false;
      if (!postRetry(*send) || !wait(*send)) return false;
    }
  }
  row->bytes = bytes;
  row->count = n;
  row->window = 1;
  if (boot_.rank() == 0) {
    std::sort(rtt.begin(), rtt.end());
    row->timeUs = rtt[rtt.size() / 2] * 1e6 / 2;
    row->p99Us = rtt[std::min(rtt.size() - 1, rtt.size() * 99 / 100)] * 1e6 / 2;
    row->gbps = bytes / (row->timeUs * 1e-6) / 1e9;
  }
  return true;
}

bool Runner::stepAlltoall(size_t bytes, Row* row) {
  std::vector<Stream*> all;
  // Receives first in the list, so they are posted before this rank's sends go out.
  for (Dir dir : {Dir::kRecv, Dir::kSend}) {
    for (Stream& s : streams_) {
      if (s.dir != dir) continue;
      int from = dir == Dir::kSend ? boot_.rank() : s.peer;
      int to = dir == Dir::kSend ? s.peer : boot_.rank();
      prepare(s, alltoallBytes(from, to, bytes));
      all.push_back(&s);
    }
  }
  long n = 0, w = warmupFor(opts_, bytes);
  auto warm0 = Clock::now();
  for (long i = 0; i < w; ++i)
    if (!runStreams(all, 1)) return false;
  if (!agreeCount(bytes, w, seconds(Clock::now() - warm0), &n)) return false;
  if (!boot_.barrier()) return fail(boot_.error());
  auto t0 = Clock::now();
  for (long i = 0; i < n; ++i)
    if (!runStreams(all, 1)) return false;
  double elapsed = seconds(Clock::now() - t0);
  // The step takes as long as its slowest rank.
  if (boot_.rank() != 0) {
    if (!boot_.send(0, &elapsed, sizeof(elapsed))) return fail(boot_.error());
  } else {
    for (int peer = 1; peer < boot_.size(); ++peer) {
      double theirs = 0;
      if (!boot_.recv(peer, &theirs, sizeof(theirs))) return fail(boot_.error());
      elapsed = std::max(elapsed, theirs);
    }
  }
  double total = 0;
  for (int from = 0; from < boot_.size(); ++from)
    for (int to = 0; to < boot_.size(); ++to)
      if (from != to) total += static_cast<double>(alltoallBytes(from, to, bytes));
  row->bytes = bytes;
  row->comms = boot_.size();
  row->count = n;
  row->window = 1;
  row->timeUs = elapsed * 1e6 / n;
  row->gbps = total / boot_.size() * n / elapsed / 1e9;  // per rank, what each one sends
  row->mmsgs = (boot_.size() - 1.0) * boot_.size() * n / elapsed / 1e6;
  return true;
}

bool Runner::setup() {
  int me = boot_.rank();
  int other = 1 - me;
  const bool lead = me == 0;
  switch (opts_.mode) {
    case Mode::kBw:
      if (!addStream(lead ? Dir::kSend : Dir::kRecv, other, 0, opts_.maxBytes)) return false;
      break;
    case Mode::kBibw:
    case Mode::kLat:
      if (!addStream(Dir::kSend, other, 0, opts_.maxBytes) ||
          !addStream(Dir::kRecv, other, 0, opts_.maxBytes))
        return false;
      break;
    case Mode::kMsgrate:
      for (int i = 0; i < opts_.comms; ++i)
        if (!addStream(lead ? Dir::kSend : Dir::kRecv, other, i, opts_.maxBytes)) return false;
      break;
    case Mode::kAlltoall:
      for (int peer = 0; peer < boot_.size(); ++peer) {
        if (peer == me) continue;
        if (!addStream(Dir::kSend, peer, 0, alltoallBytes(me, peer, opts_.maxBytes)) ||
            !addStream(Dir::kRecv, peer, 0, alltoallBytes(peer, me, opts_.maxBytes)))
          return false;
      }
      break;
    case Mode::kComms:
      return fail("comms: not a pattern (comms.cc runs it)");
  }
  if (opts_.mode != Mode::kAlltoall && opts_.mode != Mode::kLat && !addAck(other)) return false;
  return true;
}

bool Runner::step(size_t bytes, int comms, Row* row) {
  if (opts_.mode == Mode::kLat) return stepLatency(bytes, row);
  if (opts_.mode == Mode::kAlltoall) return stepAlltoall(bytes, row);
  return stepStreaming(bytes, comms, row);
}

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
