#include "support/test_env.h"

#include <sys/stat.h>
#include <unistd.h>
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
