#include "support/fake_plugin.h"

#include "core/comm.h"
#include "core/device.h"

namespace nnf::test {

FakePlugin::FakePlugin(const Options& options) : fabric_(options.fabric), plugin_(protocols_) {
  std::map<std::string, std::string> settings = options.settings;
  plugin_.initWith(config::Config::load([&settings](const char* name) -> const char* {
    auto it = settings.find(name);
    return it == settings.end() ? nullptr : it->second.c_str();
  }));
  for (int index = 0; index < 2; ++index) {
    core::DeviceSpec spec;
    spec.rdma = options.rdma;
    spec.carryingRails = options.rails;
    spec.properties.name = "fake" + std::to_string(index);
    spec.properties.ptrSupport = abi::kPtrHost;
    spec.properties.maxRecvs = 8;
    spec.properties.speedMbps = 100000;
    spec.properties.maxComms = 65536;
    for (size_t r = 0; r < options.rails; ++r) {
      spec.railNames.push_back(spec.properties.name + "_" + std::to_string(r));
    }
    plugin_.addDevice(spec, fabric_.open(options.rail, options.rails));
  }
  // One thread drives both devices: their keeper threads would race it for the fake's draws. The
  // test turns them instead (turnKeepers), when and as often as the threads would run.
  for (int index = 0; index < 2; ++index) device(index).driveKeeperManually();
  if (plugin_.listen(1, handle_, &listen_) != abi::kSuccess) ADD_FAILURE() << "listen failed";
}

FakePlugin::~FakePlugin() {
  if (listen_ != nullptr) plugin_.closeListen(listen_);
}

::testing::AssertionResult FakePlugin::connect(Pair* out) {
  Pair pair;
  // Each call progresses its device: the connect message, then the accept message, land.
  for (int tries = 0; tries < 100000 && (pair.send == nullptr || pair.recv == nullptr); ++tries) {
    if (pair.send == nullptr && plugin_.connect(0, handle_, &pair.send) != abi::kSuccess) {
      return ::testing::AssertionFailure() << "connect failed";
    }
    if (pair.recv == nullptr && plugin_.accept(listen_, &pair.recv) != abi::kSuccess) {
      return ::testing::AssertionFailure() << "accept failed";
    }
  }
  if (pair.send == nullptr || pair.recv == nullptr) {
    return ::testing::AssertionFailure() << "no connection after 100,000 tries";
  }
  *out = pair;
  return ::testing::AssertionSuccess();
}

abi::Result FakePlugin::closeWithPeer(void* comm, bool send) {
  core::Comm* base = core::Comm::fromHandle(comm);
  if (base == nullptr) return send ? plugin_.closeSend(comm) : plugin_.closeRecv(comm);
  int self = base->device().index();
  core::Device& peer = device(1 - self);
  fabric_.setPump(static_cast<size_t>(self), [&peer] {
    std::lock_guard<fabric::DomainLock> lock(peer.domainLock());
    peer.progress();
  });
  abi::Result result = send ? plugin_.closeSend(comm) : plugin_.closeRecv(comm);
  fabric_.setPump(static_cast<size_t>(self), nullptr);
  return result;
}

void FakePlugin::postOneEach(const Pair& pair, int tag, void* into, size_t capacity,
                             void* recvHandle, void* from, size_t size, void* sendHandle,
                             core::Request** recv, core::Request** send) {
  void* data[1] = {into};
  size_t sizes[1] = {capacity};
  int tags[1] = {tag};
  void* handles[1] = {recvHandle};
  *recv = nullptr;
  *send = nullptr;
  for (int tries = 0; tries < 1000 && *recv == nullptr; ++tries) {
    ASSERT_EQ(plugin_.irecv(pair.recv, 1, data, sizes, tags, handles, recv), abi::kSuccess);
  }
  for (int tries = 0; tries < 1000 && *send == nullptr; ++tries) {
    ASSERT_EQ(plugin_.isend(pair.send, from, size, tag, sendHandle, send), abi::kSuccess);
  }
  ASSERT_NE(*recv, nullptr);
  ASSERT_NE(*send, nullptr);
}

void* FakePlugin::registerMemory(void* comm, void* data, size_t size) {
  core::MemoryHandle* handle = nullptr;
  if (plugin_.regMr(comm, data, size, abi::kPtrHost, &handle) != abi::kSuccess) {
    ADD_FAILURE() << "regMr of " << size << " bytes failed";
  }
  return handle;
}

void FakePlugin::deregisterMemory(void* comm, void* handle) {
  if (plugin_.deregMr(comm, handle) != abi::kSuccess) ADD_FAILURE() << "deregMr failed";
}

::testing::AssertionResult FakePlugin::nothingHeld() {
  // The devices progress on their own a while (their keeper threads would): a closed comm goes
  // once the provider gave back its last operation and its peer's last message came.
  ::testing::AssertionResult held = holdsNothing();
  for (int round = 0; round < 100000 && !held; ++round) {
    for (int index = 0; index < 2; ++index) {
      core::Device& dev = device(index);
      std::lock_guard<fabric::DomainLock> lock(dev.domainLock());
      dev.progress();
    }
    held = holdsNothing();
  }
  // Registrations NCCL deregistered while a closing comm still used them go at the next close or
  // deregistration (MemoryRegistry::releaseOwed): this is that next one.
  for (int index = 0; index < 2; ++index) device(index).memory().releaseOwed();
  return held;
}

::testing::AssertionResult FakePlugin::holdsNothing() {
  for (int index = 0; index < 2; ++index) {
    core::Device& dev = device(index);
    std::lock_guard<fabric::DomainLock> lock(dev.domainLock());
    size_t listeners = index == 1 && listen_ != nullptr ? 1 : 0;
    if (dev.commCount() != listeners || dev.closingCount() != 0) {
      return ::testing::AssertionFailure() << "device " << index << " holds " << dev.commCount()
                                           << " comm(s) (" << dev.closingCount() << " closing)";
    }
    size_t held = 0;
    engine(index).forEachHeld([&held](const core::Operation& op) {
      if (dynamic_cast<const core::Comm*>(op.owner) != nullptr) ++held;
    });
    if (held != 0) {
      return ::testing::AssertionFailure()
             << "engine " << index << " holds " << held << " operation(s) of comms";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace nnf::test
