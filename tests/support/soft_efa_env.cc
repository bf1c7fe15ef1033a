// The softefa test provider: libfabric's real efa provider (scripts/libfabric.sh --efa) on the
// software EFA device (tests/soft_efa), with GPU buffers the CPU cannot touch (tests/fake_cuda's
// NNF_FAKE_CUDA_NO_CPU_ACCESS). The device's libraries and the fake's libcuda.so.1/libcudart.so
// are found by the dynamic loader, which reads LD_LIBRARY_PATH only when a process starts: a
// test process without them on it starts itself again with them (ctest passes one variable a
// test, see tests/CMakeLists.txt).
#include <dlfcn.h>
#include <ftw.h>
#include <glob.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/test_env.h"

namespace nnf::test {
namespace {

// The device's default PCI addresses (tests/soft_efa/config.cc: a p5's EFA NICs) as far as the
// tests use them; NNF_SOFT_EFA_PCI names others.
constexpr const char* kDefaultPci[] = {"0000:4f:00.0", "0000:50:00.0", "0000:51:00.0",
                                       "0000:52:00.0", "0000:60:00.0", "0000:61:00.0",
                                       "0000:62:00.0", "0000:63:00.0"};

std::string pciOf(int nic) {
  std::vector<std::string> list;
  if (const char* env = std::getenv("NNF_SOFT_EFA_PCI"); env != nullptr && *env != '\0') {
    std::stringstream in(env);
    for (std::string item; std::getline(in, item, ',');) list.push_back(item);
  }
  if (nic < static_cast<int>(list.size())) return list[nic];
  return nic < 8 ? kDefaultPci[nic] : "";
}

// The namespace's shared files and sysfs tree go with the test process that made it.
class SoftEfaCleanup : public ::testing::Environment {
 public:
  explicit SoftEfaCleanup(std::string ns) : ns_(std::move(ns)) {}
  void TearDown() override {
    glob_t found = {};
    std::string pattern = "/dev/shm/nnf-soft-efa-" + ns_ + "-*";
    if (glob(pattern.c_str(), 0, nullptr, &found) == 0)
      for (size_t i = 0; i < found.gl_pathc; ++i) unlink(found.gl_pathv[i]);
    globfree(&found);
    std::string tree = "/tmp/nnf-soft-efa-" + ns_;
    nftw(
        tree.c_str(),
        [](const char* path, const struct stat*, int, struct FTW*) { return remove(path); }, 16,
        FTW_DEPTH | FTW_PHYS);
    unlink(efaRulesStats().c_str());
  }

 private:
  std::string ns_;
};

// Starts this process again with the device's and the fake driver's folders first on
// LD_LIBRARY_PATH, unless they are there already.
void ensureLibraryPath() {
  std::string wanted = softEfaLibDir() + ":" + fakeCudaLibDir();
  const char* current = std::getenv("LD_LIBRARY_PATH");
  std::string path = current != nullptr ? current : "";
  if (path.compare(0, wanted.size(), wanted) == 0) return;
  setenv("LD_LIBRARY_PATH", (path.empty() ? wanted : wanted + ":" + path).c_str(), 1);
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<char*> argv;
  for (size_t at = 0; at < all.size(); at += std::strlen(&all[at]) + 1) argv.push_back(&all[at]);
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "test_env: cannot restart with LD_LIBRARY_PATH=%s: %s\n",
               std::getenv("LD_LIBRARY_PATH"), std::strerror(errno));
  std::abort();
}

}  // namespace

bool onSoftEfa() {
  const char* provider = std::getenv("NNF_TEST_PROVIDER");
  return provider != nullptr && std::strncmp(provider, "softefa", 7) == 0 &&
         (provider[7] == '\0' || provider[7] == '+');
}

std::string softEfaLibDir() {
  if (const char* dir = std::getenv("NNF_SOFT_EFA_DIR"); dir != nullptr && *dir != '\0') return dir;
  return NNF_SOFT_EFA_LIB_DIR;
}

std::string fakeCudaLibDir() {
  std::string library = fakeCudaLibrary();
  return library.substr(0, library.rfind('/')) + "/lib";
}

std::string softEfaDeviceName(int nic) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  std::sscanf(pciOf(nic).c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
  std::string name = "rdmap" + std::to_string(bus) + "s" + std::to_string(dev);
  return fn != 0 ? name + "f" + std::to_string(fn) : name;
}

bool writeSoftEfaStats() {
  std::string path = softEfaLibDir() + "/libibverbs.so.1";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return false;
  auto write = reinterpret_cast<int (*)()>(dlsym(lib, "nnf_soft_efa_write_stats"));
  bool ok = write != nullptr && write() == 0;
  dlclose(lib);
  return ok;
}

void useSoftEfa() {
  ensureLibraryPath();
  // The real efa provider, loaded from libfabric's own provider folder (FI_PROVIDER_PATH would
  // load the EFA-rules stand-in instead), alone (so its shared-memory shortcut cannot be
  // loaded either), with traffic between local processes on the device.
  unsetenv("FI_PROVIDER_PATH");
  setenv("FI_PROVIDER", "efa", 1);
  setenv("NCCL_FABRIC_PROVIDER", "efa", 1);
  setenv("FI_EFA_ENABLE_SHM_TRANSFER", "0", 1);
  setenv("NCCL_FABRIC_CUDA_LIBRARY", fakeCudaLibrary().c_str(), 0);
  setenv("NNF_FAKE_CUDA_NO_CPU_ACCESS", "1", 0);
  setenv("NNF_SOFT_EFA_NICS", std::to_string(testRails()).c_str(), 1);
  // The machine as a p5 around GPU 0, where the device's NICs sit: the plugin places them as
  // there (on this machine's own topology they would be NICs hwloc cannot find, each a WARN).
  setenv("HWLOC_XMLFILE", (sourceDir() + "/tests/fixtures/hwloc/p5-gpu0-slice.xml").c_str(), 0);
  if (std::getenv("NNF_SOFT_EFA_NS") == nullptr) {
    // A namespace of this test process (its children inherit it), removed at its end.
    std::string ns = "t" + std::to_string(static_cast<int>(getpid()));
    setenv("NNF_SOFT_EFA_NS", ns.c_str(), 1);
    setenv("SYSFS_PATH", ("/tmp/nnf-soft-efa-" + ns).c_str(), 1);
    ::testing::AddGlobalTestEnvironment(new SoftEfaCleanup(ns));
  }
  if (std::getenv("NNF_SOFT_EFA_STATS") == nullptr) {
    unlink(efaRulesStats().c_str());  // left by a killed process of this pid
    setenv("NNF_SOFT_EFA_STATS", efaRulesStats().c_str(), 1);
  }
  if (testRails() > 1) {
    std::string group = efaRulesDomainName(0);
    for (int nic = 1; nic < testRails(); ++nic) group += "," + efaRulesDomainName(nic);
    setenv("NCCL_FABRIC_RAILS", group.c_str(), 0);
  }
}

}  // namespace nnf::test
