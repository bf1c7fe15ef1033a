#include "support/test_env.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "support/processes.h"

namespace nnf::test {

std::string sharedFixturesDir() {
  const char* env = std::getenv("NNF_SHARED_FIXTURES");
  std::string dir = env != nullptr ? env : NNF_SHARED_FIXTURES_DIR;
  struct stat info;
  if (stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return "";
  return dir;
}

namespace {
// NNF_TEST_PROVIDER is "PROVIDER[+PROTOCOL][+<N>rails]" (one variable: see below).
std::string providerPart(const std::string& value) {
  return value.substr(0, value.find('+'));
}

// The parts after the provider: a protocol, and a rail count ("2rails"; 0 when absent).
void splitSuffixes(const std::string& value, std::string* protocol, int* rails) {
  *rails = 0;
  size_t start = value.find('+');
  while (start != std::string::npos) {
    size_t end = value.find('+', start + 1);
    std::string part = value.substr(start + 1, end == std::string::npos ? end : end - start - 1);
    const std::string suffix = "rails";
    if (part.size() > suffix.size() &&
        part.compare(part.size() - suffix.size(), suffix.size(), suffix) == 0)
      *rails = std::atoi(part.c_str());
    else
      *protocol = part;
    start = end;
  }
}
}  // namespace

int testRails() {
  const char* rails = std::getenv("NNF_TEST_RAILS");
  int count = rails != nullptr ? std::atoi(rails) : 1;
  return count > 0 ? count : 1;
}

std::string efaRulesDomainName(int nic) {
  if (onSoftEfa()) return softEfaDeviceName(nic) + "-rdm";  // the efa provider's RDM domain
  const char* base = std::getenv("NNF_EFA_RULES_BASE");
  std::string domain = "lo";
  if (base != nullptr && std::string(base) == "shm") {
    domain = "shm";
  } else if (const char* iface = std::getenv("FI_TCP_IFACE"); iface != nullptr && *iface) {
    domain = iface;
  }
  std::string name = "efa-" + domain + "-rdm";
  return nic == 0 ? name : name + "-" + std::to_string(nic);
}

std::string efaRulesStats() {
  static const std::string path =
      "/tmp/nnf-efa-rules-stats-" + std::to_string(static_cast<int>(getpid())) + ".txt";
  return path;
}

bool writeEfaRulesStats() {
  if (onSoftEfa()) return writeSoftEfaStats();
  // libfabric loaded the provider from FI_PROVIDER_PATH; the same file is the same object.
  std::string path = efaRulesDir() + "/libefa-rules-fi.so";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return false;
  auto write = reinterpret_cast<int (*)()>(dlsym(lib, "nnf_efa_rules_write_stats"));
  bool ok = write != nullptr && write() == 0;
  dlclose(lib);
  return ok;
}

std::map<std::string, EfaRulesTraffic> readEfaRulesStats(const std::string& path, long pid) {
  // Each line holds a process's totals so far: the last one of each (domain, pid) counts.
  std::map<std::pair<std::string, long>, EfaRulesTraffic> latest;
  std::ifstream in(path);
  // Line by line: one that does not parse (another format) is skipped, not the end of reading.
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string domain;
    EfaRulesTraffic traffic;
    long linePid = 0;
    if (!(fields >> domain >> traffic.written >> traffic.sent >> traffic.read >> linePid)) continue;
    // The software EFA device counts per device; the tests name NICs by their RDM domain.
    if (onSoftEfa() && domain.find("-rdm") == std::string::npos) domain += "-rdm";
    if (pid == 0 || linePid == pid) latest[{domain, linePid}] = traffic;
  }
  std::map<std::string, EfaRulesTraffic> sum;
  for (const auto& [key, value] : latest) {
    sum[key.first].written += value.written;
    sum[key.first].sent += value.sent;
    sum[key.first].read += value.read;
  }
  return sum;
}

bool efaRulesWrittenHere(uint64_t* written) {
  *written = 0;
  if (!writeEfaRulesStats()) return false;
  for (const auto& [domain, traffic] : readEfaRulesStats(efaRulesStats(), getpid())) {
    *written += traffic.written;
  }
  return true;
}

std::string testProvider() {
  const char* provider = std::getenv("NNF_TEST_PROVIDER");
  if (provider == nullptr) provider = std::getenv("FI_PROVIDER");
  if (provider == nullptr) return "";
  // softefa is libfabric's efa provider (on the software device): what the plugin sees.
  std::string name = providerPart(provider);
  return name == "softefa" ? "efa" : name;
}

std::string testProtocol() {
  const char* protocol = std::getenv("NCCL_FABRIC_PROTOCOL");
  return protocol != nullptr && *protocol != '\0' ? protocol : "auto";
}

std::string fakeCudaLibrary() {
  if (const char* env = std::getenv("NNF_FAKE_CUDA_LIBRARY")) return env;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  std::string dir(exe);
  dir = dir.substr(0, dir.rfind('/'));
  for (const char* candidate :
       {"/fake_cuda/libnnf_fake_cuda.so", "/../fake_cuda/libnnf_fake_cuda.so"}) {
    std::string path = dir + candidate;
    if (access(path.c_str(), R_OK) == 0) return path;
  }
  return dir + "/fake_cuda/libnnf_fake_cuda.so";
}

std::string sourceDir() {
  return NNF_SOURCE_DIR;
}

std::string efaRulesDir() {
  // A test binary run away from its build tree (tests/gpu/run.sh --prebuilt) is told where.
  if (const char* dir = std::getenv("NNF_EFA_RULES_DIR"); dir != nullptr && *dir != '\0')
    return dir;
  return NNF_EFA_RULES_DIR;
}

std::string efaRulesReport() {
  static const std::string path =
      "/tmp/nnf-efa-rules-" + std::to_string(static_cast<int>(getpid())) + ".txt";
  return path;
}

std::vector<std::string> readEfaRulesReport(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

std::map<std::string, uint64_t> readEfaRulesEvidence(const std::string& path) {
  // Each line holds a process's totals so far: the last one of each process counts.
  std::map<std::string, std::map<std::string, uint64_t>> latest;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string word, pid;
    if (!(fields >> word) || word != "rules" || !(fields >> pid) || pid.rfind("pid=", 0) != 0)
      continue;
    std::map<std::string, uint64_t> counts;
    while (fields >> word) {
      size_t equals = word.find('=');
      if (equals == std::string::npos) continue;
      counts[word.substr(0, equals)] = std::strtoull(word.c_str() + equals + 1, nullptr, 10);
    }
    latest[pid] = counts;
  }
  std::map<std::string, uint64_t> sum;
  for (const auto& [pid, counts] : latest) {
    for (const auto& [name, count] : counts) sum[name] += count;
  }
  return sum;
}

namespace {

// Completions handed out while others waited, past which some must have been reordered: each
// overtakes an older one with probability at least 1/2 (tests/efa_rules/cq.cc), so a correct
// stand-in fails this with probability below 2^-32.
constexpr uint64_t kReorderChances = 32;

// Each rule the suites rely on: the count of posts it applies to, the count of its checks, and
// what it stands for.
struct RuleEvidence {
  const char* applies;
  const char* checked;
  const char* rule;
};
constexpr RuleEvidence kRuleEvidence[] = {
    {"buffer_posts", "descriptor_checks", "FI_MR_LOCAL: every buffer posted with its descriptor"},
    {"injects", "inject_checks", "no inject from device memory"},
    {"tagged_posts", "tag_checks", "tags within mem_tag_format"},
    {"described_posts", "domain_checks", "descriptors of the endpoint's own domain"},
    {"nic_keyed_rma", "remote_key_checks", "remote keys of the target endpoint's NIC"},
    {"multi_iov_data_writes", "emulated_checks", "emulated writes copied as desc[0]'s memory"},
    {"data_posts", "immediate_checks", "EFA's 4 bytes of immediate data"},
    {"data_writes", "write_size_checks", "writes with data no longer than EFA's 1 GiB"},
    {"first_posts_to_peers", "handshake_eagains", "-FI_EAGAIN until a peer's handshake"},
    {"tagged_recvs", "roomy_recvs", "EFA's truncation error for a tagged receive"},
};

uint64_t countOf(const std::map<std::string, uint64_t>& evidence, const char* name) {
  auto found = evidence.find(name);
  return found == evidence.end() ? 0 : found->second;
}

}  // namespace

std::vector<std::string> efaRulesEvidenceGaps(const std::map<std::string, uint64_t>& evidence) {
  std::vector<std::string> gaps;
  uint64_t chances = countOf(evidence, "reorderable");
  if (chances >= kReorderChances && countOf(evidence, "reordered") == 0) {
    gaps.push_back("completions in order: none of " + std::to_string(chances) +
                   " handed out while older ones waited overtook one (NNF_EFA_RULES_REORDER)");
  }
  for (const RuleEvidence& rule : kRuleEvidence) {
    uint64_t applies = countOf(evidence, rule.applies);
    if (applies > 0 && countOf(evidence, rule.checked) == 0) {
      gaps.push_back(std::string(rule.rule) + ": " + std::to_string(applies) + " " + rule.applies +
                     ", no " + rule.checked);
    }
  }
  return gaps;
}

namespace {

// After the last test of a process run on the EFA-rules provider: any rule broken in this
// process or its children fails the run, with the provider's own words; so does a stand-in
// whose own statistics say that it did not reorder or did not check what the plugin relies on
// it to (so that a weakened stand-in fails the plugin's suites, not only its own tests).
class EfaRulesReportCheck : public ::testing::Environment {
 public:
  void TearDown() override {
    std::string path = efaRulesReport();
    std::vector<std::string> lines = readEfaRulesReport(path);
    unlink(path.c_str());
    std::string all;
    for (const std::string& line : lines) all += "  " + line + "\n";
    EXPECT_TRUE(lines.empty()) << "the plugin broke EFA rules (" << lines.size()
                               << " report lines):\n"
                               << all;
    EXPECT_TRUE(efaRulesEvidenceHolds(efaRulesStats()));
    unlink(efaRulesStats().c_str());
  }
};

void writeEfaRulesStatsAtExit() {
  writeEfaRulesStats();
}

}  // namespace

void writeEfaRulesStatsAtChildExit() {
  addChildExitHook(writeEfaRulesStatsAtExit);
}

::testing::AssertionResult efaRulesEvidenceHolds(const std::string& statsPath) {
  writeEfaRulesStats();  // this process's own share, where it used the provider
  std::map<std::string, uint64_t> evidence = readEfaRulesEvidence(statsPath);
  std::vector<std::string> gaps = efaRulesEvidenceGaps(evidence);
  if (gaps.empty()) return ::testing::AssertionSuccess();
  std::string said;
  for (const auto& [name, count] : evidence) said += " " + name + "=" + std::to_string(count);
  std::string missing;
  for (const std::string& gap : gaps) missing += "  " + gap + "\n";
  return ::testing::AssertionFailure()
         << "the EFA-rules stand-in was not what the suites rely on:\n"
         << missing << "its evidence:" << said;
}

void useTestProvider(const std::string& value) {
  std::string provider = providerPart(value);
  std::string protocol;
  int rails = 0;
  splitSuffixes(value, &protocol, &rails);
  // A plain provider runs sendrecv: auto would be rdma on all of ours (protocol_test checks
  // that choice), and the suites cover each protocol by name. A value already set is kept: the
  // children re-apply this after a test set its own.
  setenv("NCCL_FABRIC_PROTOCOL", protocol.empty() ? "sendrecv" : protocol.c_str(), 0);
  if (rails > 0) setenv("NNF_TEST_RAILS", std::to_string(rails).c_str(), 1);
  if (provider != "efa" && provider != "softefa" && testRails() > 1) {
    // Only the EFA-rules provider can present several NICs on one machine.
    std::fprintf(stderr, "test_env: %d rails need the efa provider, not %s: running on one\n",
                 testRails(), provider.c_str());
  }
  if (provider == "softefa") {
    useSoftEfa();
    return;
  }
  if (provider != "efa") {
    setenv("FI_PROVIDER", provider.c_str(), 1);
    if (provider == "tcp") setenv("FI_TCP_IFACE", "lo", 0);
    return;
  }
  unsetenv("FI_PROVIDER");
  setenv("FI_PROVIDER_PATH", efaRulesDir().c_str(), 1);
  setenv("NCCL_FABRIC_PROVIDER", "efa", 1);
  setenv("NNF_EFA_RULES_BASE", "tcp", 0);
  setenv("FI_TCP_IFACE", "lo", 0);
  setenv("NNF_EFA_RULES_REORDER", "1", 0);
  // The suites model an EFA whose queues order 128-byte blocks of messages too (libfabric before
  // 2.4, as the softefa suites' 2.1 does): init then warns about nothing. The stand-in refuses
  // that option by default, as 2.4 and later do; efa_plugin_test covers the refusal.
  setenv("NNF_EFA_RULES_SENDRECV_ORDER", "1", 0);
  setenv("NCCL_FABRIC_CUDA_LIBRARY", fakeCudaLibrary().c_str(), 0);
  if (getenv("NNF_EFA_RULES_STATS") == nullptr) {
    // Named after this process: a file a killed process of the same pid left must not count
    // (the children inherit the variable and keep the file).
    unlink(efaRulesStats().c_str());
    setenv("NNF_EFA_RULES_STATS", efaRulesStats().c_str(), 1);
  }
  writeEfaRulesStatsAtChildExit();
  if (testRails() > 1) {
    setenv("NNF_EFA_RULES_NICS", std::to_string(testRails()).c_str(), 1);
    std::string group = efaRulesDomainName(0);
    for (int nic = 1; nic < testRails(); ++nic) group += "," + efaRulesDomainName(nic);
    setenv("NCCL_FABRIC_RAILS", group.c_str(), 0);
  }
  if (getenv("NNF_EFA_RULES_REPORT") == nullptr) {
    unlink(efaRulesReport().c_str());  // as the stats file: left by a killed process of this pid
    setenv("NNF_EFA_RULES_REPORT", efaRulesReport().c_str(), 1);
    ::testing::AddGlobalTestEnvironment(new EfaRulesReportCheck);
  }
}

}  // namespace nnf::test

namespace {

// ctest gives each functional test NNF_TEST_PROVIDER (one value: CMake 3.25 cannot pass lists
// through gtest_discover_tests). Turn it into libfabric's variables before any test body runs,
// so that every process the test forks inherits them.
struct ProviderFromTestEnvironment {
  ProviderFromTestEnvironment() {
    const char* provider = std::getenv("NNF_TEST_PROVIDER");
    if (provider == nullptr || *provider == '\0') return;
    nnf::test::useTestProvider(provider);
  }
};
const ProviderFromTestEnvironment kProviderFromTestEnvironment;

}  // namespace
