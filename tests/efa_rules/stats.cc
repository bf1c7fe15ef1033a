// Per-domain traffic: the bytes each of our domain names carried (RMA writes, sends and RMA
// reads, counted when the base took the post), so that tests can tell which NICs moved a
// transfer's data, and whether the NIC (not the CPU) filled GPU memory.
//
// NNF_EFA_RULES_STATS names the file; each write appends one line per domain name this process
// used, "<domain> <bytes written by RMA> <bytes sent>
// <bytes read by RMA> <pid>", with the totals so far: a reader
// takes the last line of each (domain, pid). Written when a domain closes, at exit, and when a
// test calls nnf_efa_rules_write_stats() (a process that leaves with _exit, as forked test
// children do, writes nothing on its way out).
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "efa_rules.h"

namespace efa_rules {
namespace {

std::mutex g_mutex;
// Never erased: domains keep pointers into it, and totals outlive the domains.
std::map<std::string, std::unique_ptr<Traffic>>& table() {
  static auto* traffic = new std::map<std::string, std::unique_ptr<Traffic>>();
  return *traffic;
}

// At exit (or unload), for processes that end normally.
struct WriteAtExit {
  ~WriteAtExit() { writeStats(); }
} g_writeAtExit;

}  // namespace

Traffic* trafficOf(const std::string& domainName) {
  std::lock_guard<std::mutex> guard(g_mutex);
  std::unique_ptr<Traffic>& slot = table()[domainName];
  if (!slot) slot = std::make_unique<Traffic>();
  return slot.get();
}

void writeStats() {
  const char* path = std::getenv("NNF_EFA_RULES_STATS");
  if (path == nullptr || *path == '\0') return;
  std::string lines;
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    for (const auto& [name, traffic] : table()) {
      lines += name + " " + std::to_string(traffic->written.load()) + " " +
               std::to_string(traffic->sent.load()) + " " + std::to_string(traffic->read.load()) +
               " " + std::to_string(getpid()) + "\n";
    }
  }
  if (lines.empty()) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // One write, so that processes sharing the file never interleave within a block.
  ssize_t written = write(fd, lines.data(), lines.size());
  (void)written;
  close(fd);
}

}  // namespace efa_rules

// For tests in the process that uses the provider: find it with dlopen(RTLD_NOLOAD) and call
// this to have the totals written now. Returns 0, or -1 when NNF_EFA_RULES_STATS is unset.
extern "C" __attribute__((visibility("default"))) int nnf_efa_rules_write_stats(void) {
  const char* path = std::getenv("NNF_EFA_RULES_STATS");
  if (path == nullptr || *path == '\0') return -1;
  efa_rules::writeStats();
  return 0;
}
