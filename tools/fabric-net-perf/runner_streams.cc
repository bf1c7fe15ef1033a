#include "runner.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <functional>

namespace nnf::perf {

// Posts the next messages of each stream (s->posted counts them) until `count` are posted or
// its window is full. What the engine refuses now is retried after `progress()` (which tests
// what may free the engine's resources), up to `patience` refusals in a row a stream; the rest
// is left to runStreams. `patience` < 0: until posted (or the stall limit).
bool Runner::prePost(const std::vector<Stream*>& streams, long count, int patience,
                     const std::function<bool()>& progress) {
  auto since = Clock::now();
  for (Stream* s : streams) {
    int refused = 0;
    while (s->posted < count && s->inflight() < s->window) {
      bool posted = false;
      if (!post(*s, &posted)) return false;
      if (posted) {
        refused = 0;
        continue;
      }
      if (patience >= 0 && ++refused > patience) break;
      if (!progress() || stalled(since, "posting ahead of the round")) return false;
    }
  }
  return true;
}

// Runs `n` more messages of every stream, counting those prePost posted already.
bool Runner::runStreams(const std::vector<Stream*>& streams, long n) {
  for (Stream* s : streams) s->toPost = n;
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

// Tests one request of the acknowledgement (none: nothing to do); a received one must be
// the 8 bytes sent.
bool Runner::testAck(void*& request, uint8_t* done, bool received) {
  if (request == nullptr) return true;
  int finished = 0;
  size_t got = 0;
  if (!e_.test(request, &finished, &got)) return engineFail();
  if (!finished) return true;
  request = nullptr;
  *done = 1;
  if (received && got != kAckSent)
    return fail("acknowledgement has " + std::to_string(got) + " bytes, expected " +
                std::to_string(kAckSent));
  return true;
}

bool Runner::syncAcks(const std::vector<Stream*>* streams, long next) {
  // Everyone tells its peers "I am done" over the transport itself, so a sender's clock stops
  // only when its data has arrived, not when its buffers were merely handed off.
  std::vector<void*> recvs(acks_.size(), nullptr), sends(acks_.size(), nullptr);
  std::vector<uint8_t> recvDone(acks_.size(), 0), sendDone(acks_.size(), 0);
  auto since = Clock::now();
  if (streams != nullptr && next > 0) {
    // The acknowledgement's receive comes first on its comm (sequence numbers match in posting
    // order), then the next round's receives, then our acknowledgement: the peer's next round
    // starts with all of them posted.
    for (size_t i = 0; i < acks_.size(); ++i) {
      while (recvs[i] == nullptr) {
        Ack& a = acks_[i];
        if (!e_.irecv(a.peer, 0, a.recvBuf, kAckPosted, a.recvMh, &recvs[i])) return engineFail();
        if (recvs[i] == nullptr && stalled(since, "posting for the acknowledgement")) return false;
      }
    }
    std::vector<Stream*> receiving;
    for (Stream* s : *streams) {
      if (s->dir == Dir::kRecv) s->posted = 0, receiving.push_back(s);
    }
    // The acknowledgement's receive holds one of the comm's requests (NCCL allows 32): the
    // peer's acknowledgement, which comes whatever we do, gives it back.
    auto testAcks = [&]() {
      for (size_t i = 0; i < acks_.size(); ++i) {
        if (!testAck(recvs[i], &recvDone[i], true)) return false;
      }
      return true;
    };
    if (!prePost(receiving, next, -1, testAcks)) return false;
  }
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
      if (!testAck(recvs[i], &recvDone[i], true) || !testAck(sends[i], &sendDone[i], false))
        return false;
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
  if (opts_.order != Order::kFree) return runRounds(streams, n);
  // Nothing stops a sender of small messages from running ahead of its receiver (an eager
  // send completes at once), and a provider parks what arrives early in a bounded pool: shm
  // fails the next fi_trecv with -FI_ENOMEM once ~1,000 wait there. Long runs therefore go in
  // bursts that each end with the acknowledgement round trip (a drain every few hundred
  // messages: about 1 % of the time at 8 bytes on shm, the same for both engines).
  long burst = std::max<long>(opts_.window, kBurstMessages / static_cast<long>(streams.size()));
  for (long done = 0; done < n;) {
    long chunk = std::min(burst, n - done);
    for (Stream* s : streams) s->posted = 0;
    if (!runStreams(streams, chunk) || !syncAcks()) return false;
    done += chunk;
  }
  return true;
}

// --order: rounds of a window of messages a stream, each ended by the acknowledgement, with the
// receiver's posts placed against the sender's: all of a round's receives before the sender
// starts it (ahead: posted before the receiver acknowledges the round before), both starting
// at the acknowledgement (step), or only once the sender has posted the round's sends and said
// so over the bootstrap (behind). The same for both engines, whose ratio is the number to read.
bool Runner::runRounds(const std::vector<Stream*>& streams, long n) {
  bool receiver = streams.front()->dir == Dir::kRecv;
  int peer = streams.front()->peer;
  long round = streams.front()->window;
  // The first round's receives go before an opening acknowledgement.
  if (opts_.order == Order::kAhead && !syncAcks(&streams, std::min(round, n))) return false;
  for (long done = 0; done < n;) {
    long chunk = std::min(round, n - done);
    for (Stream* s : streams) {
      if (opts_.order != Order::kAhead || s->dir == Dir::kSend) s->posted = 0;
    }
    if (opts_.order == Order::kBehind) {
      char word = 0;
      // The sender posts what the transport takes now (a provider may want the receiver's
      // progress for the first message to a peer: shm), then tells the receiver.
      auto testOldest = [&]() {
        for (Stream* s : streams) {
          bool completed = false;
          if (!poll(*s, &completed)) return false;
        }
        return true;
      };
      bool told = receiver ? boot_.recv(peer, &word, 1)
                           : prePost(streams, chunk, 64, testOldest) && boot_.send(peer, &word, 1);
      if (!told) return error_.empty() ? fail(boot_.error()) : false;
    }
    done += chunk;
    long next = opts_.order == Order::kAhead ? std::min(round, n - done) : 0;
    auto start = Clock::now();
    if (!runStreams(streams, chunk)) return false;
    auto streamed = Clock::now();
    if (!syncAcks(&streams, next)) return false;
    phases_.streamS += seconds(streamed - start);
    phases_.ackS += seconds(Clock::now() - streamed);
    ++phases_.rounds;
  }
  return true;
}

void Runner::printPhases(size_t bytes) const {
  static bool headerPrinted = false;
  if (!headerPrinted) {
    headerPrinted = true;
    std::fprintf(stderr, "phases,engine,rank,dir,bytes,rounds,stream_us,ack_us\n");
  }
  double rounds = static_cast<double>(std::max<long>(phases_.rounds, 1));
  bool receiver = !streams_.empty() && streams_.front().dir == Dir::kRecv;
  std::fprintf(stderr, "phases,%s,%d,%s,%zu,%ld,%.3f,%.3f\n", e_.name(), boot_.rank(),
               receiver ? "recv" : "send", bytes, phases_.rounds, phases_.streamS * 1e6 / rounds,
               phases_.ackS * 1e6 / rounds);
  std::fflush(stderr);
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
  phases_ = Phases{};
  auto t0 = Clock::now();
  if (!runBursts(active, n)) return false;
  double elapsed = seconds(Clock::now() - t0);
  if (opts_.phases) printPhases(bytes);
  if (timeline_ != nullptr) timeline_->flush();
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

}  // namespace nnf::perf
