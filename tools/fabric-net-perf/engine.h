// What a benchmark pattern needs from a transport. Two implementations: the plugin driven
// through its NCCL v8 table, and a small engine on plain libfabric for the baseline. Every
// rank has `comms` send comms and `comms` receive comms to every peer; a link is named by
// (peer, index).
#pragma once

#include <cstddef>
#include <string>

#include "bootstrap.h"

namespace nnf::perf {

enum class Dir { kSend, kRecv };

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const char* name() const = 0;
  // Opens comms to every peer; collective over the bootstrap.
  virtual bool connect(Bootstrap& boot, int comms) = 0;
  virtual bool regMr(Dir dir, int peer, int index, void* data, size_t bytes, void** mh) = 0;
  virtual bool deregMr(Dir dir, int peer, int index, void* mh) = 0;
  // Start an operation. Success with *request == nullptr means "not now": progress and retry.
  virtual bool isend(int peer, int index, void* data, size_t bytes, void* mh, void** request) = 0;
  virtual bool irecv(int peer, int index, void* data, size_t bytes, void* mh, void** request) = 0;
  // *done = 1 with *bytes the delivered size once finished; the request is gone then.
  virtual bool test(void* request, int* done, size_t* bytes) = 0;
  virtual bool close() = 0;
  // Set when a call returned false.
  const std::string& error() const { return error_; }

 protected:
  std::string error_;
};

}  // namespace nnf::perf
