// Two real devices of one real plugin in one process, over the in-memory fabric
// (support/fake_fabric.h): device 0 sends, device 1 receives, with the protocols of the library's
// own protocol::Factory. Comms are made by the real listen / connect / accept messages and driven
// through core::Plugin's entry points, as the ABI shims drive them. The devices' own progress
// threads are stopped (the run is one thread, deterministic for a seed); a close, which blocks
// its caller, lets the other device progress meanwhile (FakeFabric::setPump), as that device's
// own threads would.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/plugin.h"
#include "protocol/factory.h"
#include "support/fake_fabric.h"

namespace nnf::test {

class FakePlugin {
 public:
  struct Options {
    FakeRailSpec rail;
    FakeFabricOptions fabric;
    size_t rails = 1;  // rails per device (the rdma protocol stripes over them)
    bool rdma = true;  // else sendrecv
    // NCCL_FABRIC_* settings (nothing is read from the environment).
    std::map<std::string, std::string> settings;
  };
  explicit FakePlugin(const Options& options);
  ~FakePlugin();
  FakePlugin(const FakePlugin&) = delete;
  FakePlugin& operator=(const FakePlugin&) = delete;

  core::Plugin& plugin() { return plugin_; }
  FakeFabric& fabric() { return fabric_; }
  core::Device& device(int index) { return *plugin_.deviceFor(index, "test"); }
  FakeEngine& engine(int index) { return fabric_.engine(static_cast<size_t>(index)); }

  // A send comm of device 0 connected to a receive comm of device 1.
  struct Pair {
    void* send = nullptr;
    void* recv = nullptr;
  };
  ::testing::AssertionResult connect(Pair* out);
  // Device 1's listen comm, whose handle connect() uses.
  void* listenComm() { return listen_; }
  // Closes as NCCL does (the entry point blocks until the provider holds nothing of the comm's
  // buffers), the other device progressing meanwhile.
  abi::Result closeSend(void* comm) { return closeWithPeer(comm, true); }
  abi::Result closeRecv(void* comm) { return closeWithPeer(comm, false); }
  // Registers host memory for `comm` (a send or receive comm): NCCL's regMr.
  void* registerMemory(void* comm, void* data, size_t size);
  void deregisterMemory(void* comm, void* handle);
  // One message's two ends on `pair`: a receive of one buffer (`into`, `capacity` bytes) and a
  // send of `size` bytes from `from`, both of tag `tag`, each retried while the plugin returns no
  // request (none free yet); the test fails when either is never posted.
  void postOneEach(const Pair& pair, int tag, void* into, size_t capacity, void* recvHandle,
                   void* from, size_t size, void* sendHandle, core::Request** recv,
                   core::Request** send);
  // No comm but the listener on either device, open or closing; no operation of a comm with
  // either engine (what the devices keep for themselves, control and drain receives, stays):
  // after the devices progressed on their own for a while, as their keeper threads would.
  ::testing::AssertionResult nothingHeld();
  // Where the devices' keeper threads would run: each device whose keeper is awake and due
  // (ProgressKeeper::turnIfDue) progresses once, unless the test progressed it meanwhile.
  void turnKeepers() {
    for (int index = 0; index < 2; ++index) device(index).turnKeeperIfDue();
  }

 private:
  ::testing::AssertionResult holdsNothing();
  abi::Result closeWithPeer(void* comm, bool send);

  FakeFabric fabric_;  // first: it outlives the devices' engines
  protocol::Factory protocols_;
  core::Plugin plugin_;
  void* listen_ = nullptr;
  char handle_[abi::kHandleMaxSize] = {};
};

}  // namespace nnf::test
