#include "support/test_env.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

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

namespace {

// After the last test of a process run on the EFA-rules provider: any rule broken in this
// process or its children fails the run, with the provider's own words.
class EfaRulesReportCheck : public ::testing::Environment {
 public:
  void TearDown() override {
    std::string path = efaRulesReport();
    std::vector<std::string> lines = readEfaRulesReport(path);
    unlink(path.c_str());
    unlink(efaRulesStats().c_str());
    std::string all;
    for (const std::string& line : lines) all += "  " + line + "\n";
    EXPECT_TRUE(lines.empty()) << "the plugin broke EFA rules (" << lines.size()
                               << " report lines):\n"
                               << all;
  }
};

}  // namespace

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
