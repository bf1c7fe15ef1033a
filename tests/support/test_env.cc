#include "support/test_env.h"

#include <sys/stat.h>
#include <cstdlib>

namespace nnf::test {

std::string sharedFixturesDir() {
  const char* env = std::getenv("NNF_SHARED_FIXTURES");
  std::string dir = env != nullptr ? env : NNF_SHARED_FIXTURES_DIR;
  struct stat info;
  if (stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return "";
  return dir;
}

std::string testProvider() {
  const char* provider = std::getenv("NNF_TEST_PROVIDER");
  if (provider == nullptr) provider = std::getenv("FI_PROVIDER");
  return provider != nullptr ? provider : "";
}

std::string sourceDir() {
  return NNF_SOURCE_DIR;
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
    setenv("FI_PROVIDER", provider, 1);
    if (std::string(provider) == "tcp") setenv("FI_TCP_IFACE", "lo", 0);
  }
};
const ProviderFromTestEnvironment kProviderFromTestEnvironment;

}  // namespace
