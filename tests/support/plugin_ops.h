// NCCL's way of driving the plugin, as gtest helpers: non-blocking connect/accept polled until
// they produce a comm, isend/irecv retried while they return a NULL request, and test polled
// until done. Every loop has a deadline, so a plugin that never completes fails the test rather
// than hanging it. Helpers returning void report fatal failures: call them through
// ASSERT_NO_FATAL_FAILURE.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/harness.h"

namespace nnf::test {

// How long any single plugin operation may take before the test calls it a hang.
constexpr double kOpTimeoutSec = 30;

// Page-aligned host memory, not zero-filled (tests fill what they use).
class HostBuffer {
 public:
  explicit HostBuffer(size_t size);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_;
  size_t size_;
};

struct Handle {
  char bytes[abi::kHandleMaxSize];
};

class Deadline {
 public:
  explicit Deadline(double seconds)
      : end_(std::chrono::steady_clock::now() +
             std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                 std::chrono::duration<double>(seconds))) {}
  bool expired() const { return std::chrono::steady_clock::now() >= end_; }

 private:
  std::chrono::steady_clock::time_point end_;
};

// listen on peer.dev; the comm must be non-NULL.
void listenOn(Peer& peer, Handle* handle, void** listenComm);
// connect with the same handle buffer on every call (plugins may keep state in it) until a comm
// appears.
void connectTo(Peer& peer, Handle* handle, void** sendComm);
void acceptOn(Peer& peer, void* listenComm, void** recvComm);
// Both ends in one process: connect and accept alternately until both comms exist.
void connectLocal(Peer& peer, void* listenComm, Handle* handle, void** sendComm, void** recvComm);

// Across the channel: the receiver listens, sends its handle and accepts; the sender receives
// the handle and connects. The listen comm stays open for the caller to close.
void acceptRemote(Peer& peer, void** listenComm, void** recvComm);
void connectRemote(Peer& peer, void** sendComm);

void regHost(Peer& peer, void* comm, void* data, size_t size, void** mhandle);
void dereg(Peer& peer, void* comm, void* mhandle);

// isend / irecv retried while the request comes back NULL.
void postSend(Peer& peer, void* sendComm, void* data, int size, int tag, void* mhandle,
              void** request);
void postRecv(Peer& peer, void* recvComm, void* data, int size, int tag, void* mhandle,
              void** request);
void postRecvGroup(Peer& peer, void* recvComm, int n, void** data, int* sizes, int* tags,
                   void** mhandles, void** request);

struct Outcome {
  abi::Result result = abi::kSuccess;  // first non-success result of test, if any
  bool done = false;
  bool timedOut = false;
};
// Calls test until done, an error, or the deadline. `sizes` gets what test reports (n entries
// for a grouped receive; may be nullptr).
Outcome pollRequest(Peer& peer, void* request, int* sizes, double timeoutSec = kOpTimeoutSec);
// The same, asserting success; `size` may be nullptr.
void waitDone(Peer& peer, void* request, int* sizes);
// Completes every request (in any order, as NCCL does); sizes[i] gets request i's first size.
void waitAll(Peer& peer, const std::vector<void*>& requests, std::vector<int>* sizes);

void closeSend(Peer& peer, void* comm);
void closeRecv(Peer& peer, void* comm);
void closeListen(Peer& peer, void* comm);

// Keeps the device progressing from a thread of its own while it lives, as NCCL's other proxy
// threads (or the comms of a restarted job) do: an accept on a listener nobody connects to
// drives it. For a process that waits on something else (the test channel) while its peer needs
// it to progress (rdma: it reads the descriptors its peer wrote and answers them).
class Progressor {
 public:
  explicit Progressor(Peer& peer);
  ~Progressor();
  Progressor(const Progressor&) = delete;
  Progressor& operator=(const Progressor&) = delete;

 private:
  Peer& peer_;
  void* listen_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One message of `size` bytes from `out` to `in` through a fresh comm pair in this process,
// the pair's whole life (listen, connect, register, send, receive, close): proves the plugin
// still works, and exercises every layer. The size and pattern received must be exact.
void transferOnFreshPair(Peer& peer, uint8_t* out, uint8_t* in, int size, uint64_t message);

// The receiving side of a two-process test that sends message i of `sizes` with pattern i and
// `tag`, one at a time: accepts, receives each into one buffer, checks size, pattern and the
// `tail` bytes after it (no stray write), then closes.
void receiveEachInTurn(Peer& peer, const std::vector<int>& sizes, int tag, size_t tail);
// Its sending side: connects, then sends message i of `sizes` with pattern i and `tag` from one
// registered buffer, waiting for each, then closes.
void sendEachInTurn(Peer& peer, const std::vector<int>& sizes, int tag);

}  // namespace nnf::test
