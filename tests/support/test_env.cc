#include "support/test_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

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
// NNF_TEST_PROVIDER is "PROVIDER" or "PROVIDER+PROTOCOL" (one variable: see below).
std::string providerPart(const std::string& value) {
  return value.substr(0, value.find('+'));
}
}  // namespace

std::string testProvider() {
  const char* provider = std::getenv("NNF_TEST_PROVIDER");
  if (provider == nullptr) provider = std::getenv("FI_PROVIDER");
  return provider != nullptr ? providerPart(provider) : "";
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
  if (provider.size() < value.size()) {
    setenv("NCCL_FABRIC_PROTOCOL", value.substr(provider.size() + 1).c_str(), 1);
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
  setenv("NCCL_FABRIC_CUDA_LIBRARY", fakeCudaLibrary().c_str(), 0);
  if (getenv("NNF_EFA_RULES_REPORT") == nullptr) {
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
