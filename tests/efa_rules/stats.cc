// Per-domain traffic: the bytes each of our domain names carried (RMA writes, sends and RMA
// reads, counted when the base took the post), so that tests can tell which NICs moved a
// transfer's data, and whether the NIC (not the CPU) filled GPU memory.
//
// NNF_EFA_RULES_STATS names the file; each write appends one line per domain name this process
// used, "<domain> <bytes written by RMA> <bytes sent>
// <bytes read by RMA> <pid>", with the totals so far: a reader
// takes the last line of each (domain, pid). Then one line of evidence that the rules were at
// work (efa_rules.h, Evidence): "rules pid=<pid> <name>=<count> ...", totals so far. Written when
// a domain closes, at exit, and when a test calls nnf_efa_rules_write_stats() (a process that
// leaves with _exit, as forked test children do, writes nothing on its way out unless its exit
// hook calls that: tests/support/processes.h).
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "efa_rules.h"

namespace efa_rules {
namespace {

std::mutex g_mutex;
std::atomic<uint64_t> g_evidence[static_cast<int>(Evidence::kCount)];

constexpr const char* kEvidenceNames[] = {
    "reorderable",           "reordered",         "buffer_posts",
    "descriptor_checks",     "injects",           "inject_checks",
    "tagged_posts",          "tag_checks",        "described_posts",
    "domain_checks",         "nic_keyed_rma",     "remote_key_checks",
    "multi_iov_data_writes", "emulated_checks",   "data_posts",
    "immediate_checks",      "data_writes",       "write_size_checks",
    "first_posts_to_peers",  "handshake_eagains", "tagged_recvs",
    "roomy_recvs",           "remote_writes",
};
static_assert(sizeof(kEvidenceNames) / sizeof(kEvidenceNames[0]) ==
              static_cast<size_t>(Evidence::kCount));

// "rules pid=<pid> name=count ...", or "" when nothing was noted.
std::string evidenceLine() {
  std::string line = "rules pid=" + std::to_string(getpid());
  bool any = false;
  for (int i = 0; i < static_cast<int>(Evidence::kCount); ++i) {
    uint64_t count = g_evidence[i].load();
    any = any || count > 0;
    line += std::string(" ") + kEvidenceNames[i] + "=" + std::to_string(count);
  }
  return any ? line + "\n" : "";
}

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

void note(Evidence what) {
  g_evidence[static_cast<int>(what)].fetch_add(1, std::memory_order_relaxed);
}

const char* evidenceName(Evidence what) {
  return kEvidenceNames[static_cast<int>(what)];
}

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
  lines += evidenceLine();
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
