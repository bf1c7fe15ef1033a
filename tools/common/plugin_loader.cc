#include "plugin_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace nnf::tools {

PluginLibrary::PluginLibrary(const std::string& path, int version) : path_(path) {
  // RTLD_LOCAL like NCCL, so that nothing leaks between the plugin and its host.
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr)
    throw std::runtime_error(std::string("cannot load the plugin: ") + dlerror());
  int newest = version != 0 ? version : kNewestAbi;
  int oldest = version != 0 ? version : kOldestAbi;
  const void* table = nullptr;
  for (int v = newest; v >= oldest && table == nullptr; --v) {
    table = dlsym(handle_, ("ncclNetPlugin_v" + std::to_string(v)).c_str());
    if (table != nullptr) version_ = v;
  }
  if (table == nullptr) {
    dlclose(handle_);
    std::string wanted = version != 0 ? "ncclNetPlugin_v" + std::to_string(version)
                                      : "any of ncclNetPlugin_v12 to _v6";
    throw std::runtime_error(path + " is not an NCCL net plugin: it exports no " + wanted);
  }
  net_ = adaptToV8(table, version_);
}

PluginLibrary::~PluginLibrary() {
  // Unloading at exit is unnecessary and would race with atexit handlers: the library stays
  // mapped unless unload() was called.
}

void PluginLibrary::unload() {
  if (handle_ == nullptr) return;
  dlclose(handle_);
  handle_ = nullptr;
  net_ = nullptr;
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

int versionFromEnv(const char* variable, const char* what, int oldest, int newest) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return 0;
  std::string text = value[0] == 'v' ? value + 1 : value;
  char* end = nullptr;
  long version = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || version < oldest || version > newest) {
    throw std::runtime_error(std::string(variable) + "=" + value + " is not " + what + " (v" +
                             std::to_string(oldest) + "..v" + std::to_string(newest) + ")");
  }
  return static_cast<int>(version);
}

int abiVersionFromEnv(const char* variable) {
  return versionFromEnv(variable, "an ABI version", kOldestAbi, kNewestAbi);
}

std::string defaultPluginPath(const char* builtPath) {
  const char* env = std::getenv("NNF_PLUGIN");
  if (env != nullptr && *env != '\0') return env;
  // An installed tool sits in <prefix>/bin with the plugin in <prefix>/lib: found relative to
  // the executable, so a copied or relocated prefix still works.
  char self[PATH_MAX];
  ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length > 0) {
    std::string exe(self, static_cast<size_t>(length));
    std::string installed = exe.substr(0, exe.rfind('/') + 1) + NNF_PLUGIN_FROM_BIN;
    if (access(installed.c_str(), R_OK) == 0) return installed;
  }
  return builtPath;
}

}  // namespace nnf::tools
