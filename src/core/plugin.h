// The one plugin object: configuration, the chosen provider and the devices. Every NCCL entry
// point lands here through a thin ABI shim; arguments are validated here, once for all ABIs.
// The plugin's assembly (src/abi/assembly.cc) builds it over the protocols the library carries.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "config/config.h"
#include "core/device.h"
#include "memory/cuda_driver.h"
#include "nccl_net/types.h"

namespace nnf::fabric {
struct ProviderChoice;
}  // namespace nnf::fabric

namespace nnf::core {

struct DevicePlan;
struct NetworkPlan;
class ListenComm;
class SendComm;
class RecvComm;
struct MemoryHandle;
struct Request;

class Plugin {
 public:
  static Plugin& instance() { return *instance_; }
  // The library's one plugin is instance(), built by the assembly over the protocols it carries
  // (`protocols` outlives the plugin). A unit test may build its own over in-memory rails: see
  // initWith().
  explicit Plugin(const protocol::ProtocolFactory& protocols) : protocols_(protocols) {}
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  abi::Result init(abi::Logger logger);
  abi::Result deviceCount(int* count);
  abi::Result properties(int dev, const DeviceProperties** out);

  // `out` receives the opaque comm handle NCCL holds (Comm::handle()).
  abi::Result listen(int dev, void* handle, void** out);
  abi::Result connect(int dev, void* handle, void** out);
  abi::Result accept(void* listenComm, void** out);
  abi::Result closeListen(void* listenComm);
  abi::Result closeSend(void* sendComm);
  abi::Result closeRecv(void* recvComm);

  abi::Result regMr(void* comm, void* data, size_t size, int type, MemoryHandle** out);
  abi::Result regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                          MemoryHandle** out);
  abi::Result deregMr(void* comm, void* handle);

  abi::Result isend(void* sendComm, void* data, size_t size, int tag, void* handle, Request** out);
  abi::Result irecv(void* recvComm, int count, void* const* data, const size_t* sizes,
                    const int* tags, void* const* handles, Request** out);
  abi::Result iflush(void* recvComm, int count, void* const* data, const int* sizes,
                     void* const* handles, Request** out);
  // `sizes` receives one entry per operation of the request (up to maxRecvs); may be null.
  abi::Result test(void* request, int* done, size_t* sizes, int* count);

  const config::Config* config() const { return config_ ? &*config_ : nullptr; }
  // Device `dev` after a successful init, else nullptr with one WARN naming `caller` (the
  // one-sided RMA layer runs on the same devices).
  Device* deviceFor(int dev, const char* caller) { return device(dev, caller); }
  size_t deviceTotal() const { return initialized() ? devices_.size() : 0; }

  // The library is being unloaded (dlclose, or the process exits): the devices' own threads end,
  // so that none runs code that is about to be unmapped. The plugin itself stays (see instance_).
  void stopThreads();

  // Unit tests (tests/support/fake_fabric.h): an initialised plugin with no provider and no
  // device yet; `config` stands for what init() reads. Its devices come from addDevice().
  void initWith(config::Config config);
  // Opens device number deviceTotal() over `rails` with the plugin's protocols and config: what
  // init() does for each planned device over the rails it opens (core/fabric_rails.h). Throws
  // what the device's construction throws.
  Device& addDevice(const DeviceSpec& spec, std::unique_ptr<DeviceRails> rails);

 private:
  // Defined by the assembly: created when the library loads, so the data path reads a plain
  // pointer; never destroyed: NCCL's proxy threads may still call in while the process exits.
  static Plugin* const instance_;
  Device* device(int dev, const char* caller);
  bool initialized() const;
  // init()'s steps, under initMutex_; initLocked() returns what init() answers from then on.
  abi::Result initLocked();
  void preparePointerSupport(const fabric::ProviderChoice& choice, memory::GdrMode gdrMode,
                             DevicePlan& plan);
  void openDevices(const DevicePlan& plan);
  // Applies the protocol and topology the open devices allow, and logs them.
  void publishDevices(const NetworkPlan& network);
  // Validates an opaque comm pointer from NCCL; logs and returns nullptr when it is not one.
  template <typename CommType>
  CommType* checkComm(void* comm, Comm::Kind kind, const char* caller);

  // Comms and memory handles NCCL holds. Closing and deregistering check here first, so a
  // double close or a stale pointer is reported without touching freed memory.
  void track(const void* object);
  bool untrack(const void* object);
  bool tracked(const void* object);

  const protocol::ProtocolFactory& protocols_;
  std::mutex liveMutex_;
  std::unordered_set<const void*> live_;
  std::mutex initMutex_;
  bool initDone_ = false;
  abi::Result initResult_ = abi::kSuccess;
  std::optional<config::Config> config_;
  std::string provider_;
  std::optional<memory::CudaDriver> cuda_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace nnf::core
