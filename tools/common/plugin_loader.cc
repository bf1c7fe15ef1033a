#include "plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>

namespace nnf::tools {

PluginLibrary::PluginLibrary(const std::string& path) : path_(path) {
  // RTLD_LOCAL like NCCL, so that nothing leaks between the plugin and its host.
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) throw std::runtime_error("dlopen " + path + ": " + dlerror());
  net_ = static_cast<const abi::NetV8*>(dlsym(handle_, "ncclNetPlugin_v8"));
  if (net_ == nullptr) {
    std::string error = dlerror();
    dlclose(handle_);
    throw std::runtime_error("dlsym ncclNetPlugin_v8 in " + path + ": " + error);
  }
}

PluginLibrary::~PluginLibrary() {
  // The plugin owns threads-free global state only; unloading at exit is unnecessary and
  // would race with atexit handlers, so the library stays mapped.
}

const char* resultName(abi::Result result) {
  switch (result) {
    case abi::kSuccess:
      return "ncclSuccess";
    case abi::kUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case abi::kSystemError:
      return "ncclSystemError";
    case abi::kInternalError:
      return "ncclInternalError";
    case abi::kInvalidArgument:
      return "ncclInvalidArgument";
    case abi::kInvalidUsage:
      return "ncclInvalidUsage";
    case abi::kRemoteError:
      return "ncclRemoteError";
    case abi::kInProgress:
      return "ncclInProgress";
  }
  return "unknown result";
}

std::string defaultPluginPath(const char* builtPath) {
  const char* env = std::getenv("NNF_PLUGIN");
  return env != nullptr ? env : builtPath;
}

}  // namespace nnf::tools
