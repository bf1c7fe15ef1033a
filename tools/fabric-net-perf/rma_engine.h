// What the rma mode needs from a one-sided transport. Two implementations: the plugin's RMA table
// (rma_plugin_engine.h) and raw libfabric RMA (rma_raw_engine.h). Every rank registers one window
// of the same size; operations name places in the windows by offset. A signal from rank s lands
// in the target's count of signals from s, after the data of the same operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bootstrap.h"

namespace nnf::perf {

// The first bytes of every window: one 64-byte signal word per source rank (the plugin's words;
// the raw engine counts its write-with-immediate completions instead and leaves them unused).
constexpr size_t kSignalStride = 64;

inline size_t signalOffset(int source) {
  return static_cast<size_t>(source) * kSignalStride;
}

class RmaEngine {
 public:
  virtual ~RmaEngine() = default;
  virtual const char* name() const = 0;
  virtual std::string description() const = 0;
  // Opens the group of all ranks; collective over the bootstrap.
  virtual bool connect(Bootstrap& boot) = 0;
  // This rank's window (host memory, the same size on every rank); collective.
  virtual bool regWindow(Bootstrap& boot, char* base, size_t bytes) = 0;
  virtual bool deregWindow() = 0;
  // Start an operation. Success with *request == nullptr means "not now": progress and retry.
  virtual bool put(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) = 0;
  virtual bool putSignal(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) = 0;
  virtual bool get(int peer, size_t remoteOff, size_t localOff, size_t bytes, void** request) = 0;
  // *done = 1 once finished; the request is gone then.
  virtual bool test(void* request, int* done) = 0;
  // Makes progress and says how many signals from `peer` have arrived here.
  virtual bool signals(int peer, uint64_t* count) = 0;
  virtual bool close() = 0;
  // Set when a call returned false.
  const std::string& error() const { return error_; }

 protected:
  std::string error_;
};

}  // namespace nnf::perf
