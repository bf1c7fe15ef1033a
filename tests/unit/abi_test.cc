// The built library as NCCL's loader sees it: the v8 symbol, a complete function table, and no
// other exported symbols than the net v6 to v12 and RMA v13 to v15 tables (anything else would
// clash with NCCL or another plugin in the process; functional/abi_versions_test.cc checks the
// tables of every version).
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "nccl_net/net.h"
#include "support/abi_entries.h"
#include "support/harness.h"

namespace nnf::test {
namespace {

class AbiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = pluginPath();
    struct stat info;
    // Unit tests do not depend on the plugin target: say so instead of testing a stale file.
    ASSERT_EQ(stat(path_.c_str(), &info), 0)
        << path_ << " does not exist: build the nccl-net-fabric target first";
  }
  std::string path_;
};

TEST_F(AbiTest, ExportsTheV8TableWithEveryEntryPoint) {
  void* library = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  const auto* net = static_cast<const abi::NetV8*>(dlsym(library, "ncclNetPlugin_v8"));
  ASSERT_NE(net, nullptr) << "no ncclNetPlugin_v8 in " << path_;
  // NCCL calls some of these without checking for NULL; all must be there.
  ASSERT_NO_FATAL_FAILURE(expectCommonEntries(net));
  expectOffloadEntries(net);
  // The table is data NCCL reads; a symbol of the wrong kind (a function) would crash it.
  Dl_info info;
  ASSERT_NE(dladdr(net, &info), 0);
  EXPECT_STREQ(info.dli_sname, "ncclNetPlugin_v8");
}

TEST_F(AbiTest, LoadsWithoutUnresolvedSymbols) {
  // RTLD_NOW resolves everything now, as NCCL does: a missing symbol fails here, not mid-job.
  void* library = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(library, nullptr) << dlerror();
}

TEST_F(AbiTest, ExportsOnlyPluginSymbols) {
  std::string command = "nm -D --defined-only '" + path_ + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  // Linker-made markers that every shared object carries.
  const std::set<std::string> allowed = {"_init", "_fini", "_edata", "_end", "__bss_start"};
  std::string output;
  std::ostringstream leaked;
  std::set<std::string> plugin;
  char line[4096];
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    output += line;
    std::istringstream fields(line);
    std::string address, kind, name;
    if (!(fields >> address >> kind >> name)) continue;
    // Lower-case kinds are local; only global (upper-case) and unique (u) ones are visible.
    bool global = (kind.size() == 1 && isupper(static_cast<unsigned char>(kind[0]))) || kind == "u";
    if (!global || kind == "A" || allowed.count(name) != 0) continue;
    if (name.rfind("ncclNetPlugin_", 0) == 0 || name.rfind("ncclRmaPlugin_", 0) == 0) {
      plugin.insert(name);
      continue;
    }
    // AddressSanitizer builds add a one-definition-rule indicator beside each exported global.
    if (name.rfind("__odr_asan.ncclNetPlugin_", 0) == 0 ||
        name.rfind("__odr_asan.ncclRmaPlugin_", 0) == 0)
      continue;
    leaked << "  " << kind << " " << name << "\n";
  }
  int status = pclose(pipe);
  ASSERT_EQ(status, 0) << "nm failed:\n" << output;
  // Every net version NCCL 2.12 to 2.30 can load, the RMA tables NCCL 2.30 and 2.31 look for in
  // the net plugin library, and nothing else (no collnet, no v5 and older, no GIN table: NCCL
  // would take an ncclGinPlugin_v13 for a full GIN plugin).
  const std::set<std::string> versions = {
      "ncclNetPlugin_v6",  "ncclNetPlugin_v7",  "ncclNetPlugin_v8",  "ncclNetPlugin_v9",
      "ncclNetPlugin_v10", "ncclNetPlugin_v11", "ncclNetPlugin_v12", "ncclRmaPlugin_v13",
      "ncclRmaPlugin_v14", "ncclRmaPlugin_v15"};
  EXPECT_EQ(plugin, versions) << output;
  EXPECT_EQ(leaked.str(), "") << "symbols exported besides the plugin tables:\n" << leaked.str();
}

}  // namespace
}  // namespace nnf::test
