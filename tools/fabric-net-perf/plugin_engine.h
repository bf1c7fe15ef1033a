// Drives libnccl-net-fabric.so through its ncclNetPlugin_v8 table in the order and with the
// conventions NCCL uses: init, devices, getProperties, listen / connect / accept until the comms
// appear, regMr (host memory), isend / irecv retried on a NULL request, test until done.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "engine.h"
#include "nccl_net/net.h"
#include "plugin_loader.h"

namespace nnf::perf {

class PluginEngine : public Engine {
 public:
  PluginEngine(std::string path, int dev) : path_(std::move(path)), dev_(dev) {}
  ~PluginEngine() override;
  const char* name() const override { return "plugin"; }
  // Loads the library, calls init / devices / getProperties.
  bool load();
  bool connect(Bootstrap& boot, int comms) override;
  bool regMr(Dir dir, int peer, int index, void* data, size_t bytes, void** mh) override;
  bool deregMr(Dir dir, int peer, int index, void* mh) override;
  bool isend(int peer, int index, void* data, size_t bytes, void* mh, void** request) override;
  bool irecv(int peer, int index, void* data, size_t bytes, void* mh, void** request) override;
  bool test(void* request, int* done, size_t* bytes) override;
  bool close() override;

  const abi::PropertiesV8& properties() const { return props_; }
  // The table and device, for the comms mode, which drives them itself (comms.h).
  const abi::NetV8& net() const { return *net_; }
  int dev() const { return dev_; }
  std::string description() const;

 private:
  using Handle = std::array<char, abi::kHandleMaxSize>;
  bool check(const char* call, abi::Result rc);
  void* comm(Dir dir, int peer, int index) const;

  std::string path_;
  int dev_;
  std::unique_ptr<tools::PluginLibrary> lib_;
  const abi::NetV8* net_ = nullptr;
  abi::PropertiesV8 props_{};
  int ndev_ = 0;
  int comms_ = 0;
  std::vector<void*> sendComms_, recvComms_;  // [peer * comms_ + index]
};

// The plugin library at `path` (tools/common/plugin_loader.h); nullptr with *error set, on one
// line, where it cannot be loaded.
std::unique_ptr<tools::PluginLibrary> loadPluginLibrary(const std::string& path,
                                                        std::string* error);

// "plugin <call> returned ncclSystemError (2); see the NCCL WARN lines above": how the engines
// report a plugin call that failed.
std::string pluginCallError(const std::string& call, abi::Result rc);

// Sets the rank printed in front of the plugin's log lines.
void setLogRank(int rank);
// The logger handed to the plugin's init (NCCL_DEBUG picks the level), for the RMA table too.
abi::Logger pluginLogger();

}  // namespace nnf::perf
