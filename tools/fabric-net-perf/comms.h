// The comms mode: many comms open at once between two ranks, as NCCL's proxy opens one per
// channel and peer (and all-to-all or PXN one per remote rank). Rank 0 receives: it listens
// --comms times and sends every handle to rank 1, which connects them all while rank 0 accepts
// them all, each side polling all of its pending comms round-robin. Then one message of -b bytes
// on every comm (one registration of one buffer serves them all: regIsGlobal), every byte
// checked, and every comm closed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "options.h"
#include "plugin_engine.h"

namespace nnf::perf {

// What one side measured. Plain data: the sender sends its copy to rank 0 over the bootstrap.
struct CommsSide {
  int rank = 0;
  int receiver = 0;  // 1 on rank 0 (listen, accept, irecv), 0 on rank 1 (connect, isend)
  long comms = 0;
  size_t bytes = 0;
  double setupSec = 0;  // first listen (receiver) or connect (sender) to the last comm open
  double dataSec = 0;   // regMr, every message posted and tested to completion
  double closeSec = 0;  // closeRecv / closeSend of every comm
  // Resident memory just before the first listen / connect, and with every comm open after the
  // data; file descriptors at the same two points and once everything is closed.
  long rssBefore = 0, rssOpen = 0;
  int fdsBefore = 0, fdsOpen = 0, fdsClosed = 0;

  double rssPerComm() const {
    return comms > 0 ? static_cast<double>(rssOpen - rssBefore) / static_cast<double>(comms) : 0;
  }
};

// Runs the mode on both ranks over a loaded plugin; rank 0 gets both sides in *sides (its own
// first). Returns false with *error on a plugin error, a timeout or wrong data.
bool runComms(PluginEngine& plugin, Bootstrap& boot, const Options& opts,
              std::vector<CommsSide>* sides, std::string* error);

}  // namespace nnf::perf
