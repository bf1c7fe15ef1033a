// Out-of-band channel between the ranks of one run. It carries only connection set-up data
// (the plugin's listen handles, raw endpoint names) and barriers; every byte measured goes
// through the plugin or libfabric.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace nnf::perf {

class Bootstrap {
 public:
  Bootstrap(int rank, std::vector<int> fds) : rank_(rank), fds_(std::move(fds)) {}
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(fds_.size()); }
  bool send(int peer, const void* data, size_t bytes);
  bool recv(int peer, void* data, size_t bytes);
  // Sends mine[peer] to every peer and receives theirs into theirs[peer] (same length each).
  bool exchange(const std::vector<std::string>& mine, std::vector<std::string>* theirs);
  bool barrier();
  const std::string& error() const { return error_; }

 private:
  int rank_;
  std::vector<int> fds_;  // fds_[peer], -1 for this rank
  std::string error_;
};

using RankBody = std::function<int(Bootstrap&)>;

// Forks `ranks` processes joined by socketpairs and runs body in each; returns 0 when every rank
// returned 0. A failing rank takes the others down after a grace period so that nothing hangs.
// With pin, rank r runs on the r-th allowed CPU.
int runLocalRanks(int ranks, bool pin, const RankBody& body);
// Whether this process may use at least `ranks` CPUs.
bool enoughCpusToPin(int ranks);

// Two hosts: the listening side (rank 0) waits on port, the other (rank 1) connects to host.
// `key` must match on both sides (same mode and sweep) or the run stops with a message.
int runTwoHosts(bool listen, const std::string& host, int port, const std::string& key,
                const RankBody& body);

}  // namespace nnf::perf
