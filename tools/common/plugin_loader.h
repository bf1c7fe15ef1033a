// Loads the plugin with dlopen and finds its ncclNetPlugin_v<N> table newest-first, as NCCL's
// loader does, handing it out in v8's shape (abi_adapter.h). Shared by the tools and the tests.
#pragma once

#include <string>

#include "nccl_net/net.h"
#include "abi_adapter.h"

namespace nnf::tools {

class PluginLibrary {
 public:
  // version 0: the newest the library exports (v12 down to v6, as NCCL 2.30 searches); else
  // exactly ncclNetPlugin_v<version>. Throws std::runtime_error with the reason on one line when
  // the library or symbol is missing.
  explicit PluginLibrary(const std::string& path, int version = 0);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  // What NCCL does after its last comm of the plugin: dlclose. net() is invalid afterwards.
  void unload();

  const abi::NetV8& net() const { return *net_; }
  // The dlopen handle (the RMA tables are found in the same library: rma_loader.h).
  void* handle() const { return handle_; }
  const std::string& path() const { return path_; }
  int version() const { return version_; }

 private:
  std::string path_;
  void* handle_ = nullptr;
  const abi::NetV8* net_ = nullptr;
  int version_ = 0;
};

// "v12", "12" or "" (0: newest) from an environment variable; throws std::runtime_error naming
// the variable, its value and the range when it is anything else.
int abiVersionFromEnv(const char* variable);
// The same for any range: "<variable>=<value> is not <what> (v<oldest>..v<newest>)".
int versionFromEnv(const char* variable, const char* what, int oldest, int newest);

// "ncclSuccess", "ncclSystemError", ... for messages.
const char* resultName(abi::Result result);

// Where a tool finds the plugin when --plugin is not given: NNF_PLUGIN if set; else, for an
// installed tool, the plugin installed beside it ($ORIGIN/../lib); else the build tree's plugin.
std::string defaultPluginPath(const char* builtPath);

}  // namespace nnf::tools
