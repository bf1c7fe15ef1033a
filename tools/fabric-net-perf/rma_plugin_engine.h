// Drives the plugin's RMA table as NCCL 2.30+ does: the table found newest first
// (tools/common/rma_loader.h), init, listen, the all-gather of the handles, the collective
// connect, one context, a symmetric window, requests tested until done with rmaProgress between
// tests. Signals are INC on the target's 64-bit word of the source (rma_engine.h), read there
// with acquire.
#pragma once

#include <memory>
#include <string>

#include "nccl_rma/rma.h"
#include "plugin_loader.h"
#include "rma_engine.h"

namespace nnf::perf {

class RmaPluginEngine : public RmaEngine {
 public:
  RmaPluginEngine(std::string path, int dev) : path_(std::move(path)), dev_(dev) {}
  ~RmaPluginEngine() override;
  const char* name() const override { return "plugin"; }
  std::string description() const override;
  // Loads the library, finds the table, calls init / devices / getProperties.
  bool load();
  bool connect(Bootstrap& boot) override;
  bool regWindow(Bootstrap& boot, char* base, size_t bytes) override;
  bool deregWindow() override;
  bool put(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) override;
  bool putSignal(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) override;
  bool get(int peer, size_t remoteOff, size_t localOff, size_t bytes, void** request) override;
  bool test(void* request, int* done) override;
  bool signals(int peer, uint64_t* count) override;
  bool close() override;

 private:
  bool check(const char* call, abi::Result rc);

  std::string path_;
  int dev_;
  std::unique_ptr<tools::PluginLibrary> lib_;
  const abi::RmaV15* rma_ = nullptr;
  int version_ = 0;
  int rank_ = 0;
  std::string deviceName_;
  void* instance_ = nullptr;
  void* coll_ = nullptr;
  void* ctx_ = nullptr;
  void* window_ = nullptr;
  char* base_ = nullptr;
};

}  // namespace nnf::perf
