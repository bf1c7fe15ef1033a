// Loads the built plugin with dlopen and hands out its ncclNetPlugin_v8 table, exactly as NCCL's
// loader does. Shared by the tools and the functional tests.
#pragma once

#include <string>

#include "abi/nccl_abi.h"

namespace nnf::tools {

class PluginLibrary {
 public:
  // Throws std::runtime_error with dlerror() text when the library or symbol is missing.
  explicit PluginLibrary(const std::string& path);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const abi::NetV8& net() const { return *net_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* handle_ = nullptr;
  const abi::NetV8* net_ = nullptr;
};

// "ncclSuccess", "ncclSystemError", ... for messages.
const char* resultName(abi::Result result);

// The plugin next to the running executable's build tree, or NNF_PLUGIN (environment) if set.
std::string defaultPluginPath(const char* builtPath);

}  // namespace nnf::tools
