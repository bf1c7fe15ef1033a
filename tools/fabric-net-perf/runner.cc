#include "runner.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nnf::perf {
namespace {

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

}  // namespace

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
  if (timeline_ != nullptr) timeline_->tick();
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
  if (timeline_ != nullptr) timeline_->add(s.dir, s.bytes);
  return s.dir == Dir::kSend || verify(s, seq, got);
}

bool Runner::stalled(Clock::time_point since, const char* what) {
  // See runStreams. Latency never yields: measured here, any yield turns a microsecond wait
  // into a scheduler time slice whenever the machine has other work.
  if ((++idleSpins_ & 63) == 0 && opts_.mode != Mode::kLat) sched_yield();
  if (timeline_ != nullptr) timeline_->tick();
  if (Clock::now() - since < std::chrono::seconds(kStallSeconds)) return false;
  fail(std::string(e_.name()) + ": no progress for " + std::to_string(kStallSeconds) + " s while " +
       what + " (is the peer alive?)");
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
  if (opts_.timelineMs > 0) timeline_ = std::make_unique<Timeline>(opts_.timelineMs, e_.name(), me);
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
    case Mode::kRma:
      return fail("rma: not a pattern (rma_runner.cc runs it)");
  }
  if (opts_.mode != Mode::kAlltoall && opts_.mode != Mode::kLat && !addAck(other)) return false;
  return true;
}

bool Runner::step(size_t bytes, int comms, Row* row) {
  if (opts_.mode == Mode::kLat) return stepLatency(bytes, row);
  if (opts_.mode == Mode::kAlltoall) return stepAlltoall(bytes, row);
  return stepStreaming(bytes, comms, row);
}

}  // namespace nnf::perf
