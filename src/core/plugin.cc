#include "core/plugin.h"

#include <rdma/fabric.h>

#include <cstdlib>
#include <stdexcept>

#include "core/fabric_rails.h"
#include "core/network_plan.h"
#include "log/log.h"
#include "memory/gdr_policy.h"
#include "memory/region.h"
#include "platform/dmabuf_probe.h"
#include "platform/env_defaults.h"
#include "platform/provider_rules.h"

namespace nnf::core {
namespace {
// Runs when the library is unloaded (NCCL dlcloses its net plugin after the last comm) and at
// exit: the devices' threads live in this library's code.
struct ThreadsStopper {
  ~ThreadsStopper() { Plugin::instance().stopThreads(); }
} threadsStopper;

void logDevice(const Device& device) {
  const DeviceProperties& props = device.properties();
  std::string rails;
  for (const std::string& rail : device.railNames()) rails += (rails.empty() ? "" : ",") + rail;
  std::string gpus;
  for (const std::string& gpu : device.gpus()) gpus += (gpus.empty() ? "" : ",") + gpu;
  NNF_INFO(abi::kLogSubsysInit,
           "device %d: %s rails=%s gpus=%s pci=%s speed=%d Mbps maxRecvs=%d ptrSupport=%d",
           device.index(), props.name.c_str(), rails.c_str(), gpus.empty() ? "none" : gpus.c_str(),
           props.pciPath.empty() ? "none" : props.pciPath.c_str(), props.speedMbps, props.maxRecvs,
           props.ptrSupport);
}
}  // namespace

void Plugin::stopThreads() {
  std::lock_guard<std::mutex> lock(initMutex_);
  for (auto& device : devices_) device->stopThreads();
}

bool Plugin::initialized() const {
  return initDone_ && initResult_ == abi::kSuccess;
}

abi::Result Plugin::init(abi::Logger logger) {
  std::lock_guard<std::mutex> lock(initMutex_);
  if (logger != nullptr) log::setLogger(logger);
  // NCCL may initialise the plugin more than once per process: the first result stands.
  if (initDone_) return initResult_;
  initDone_ = true;
  // Stays if an exception escapes to the export's firewall.
  initResult_ = abi::kInternalError;
  initResult_ = initLocked();
  return initResult_;
}

abi::Result Plugin::initLocked() {
  try {
    config_ = config::Config::load();
  } catch (const config::ConfigError& error) {
    NNF_WARN("invalid configuration: %s", error.what());
    return abi::kInvalidUsage;
  }
  NNF_INFO(abi::kLogSubsysInit, "nccl-net-fabric %s, libfabric %u.%u (built with %d.%d)",
           NNF_VERSION, FI_MAJOR(fi_version()), FI_MINOR(fi_version()), FI_MAJOR_VERSION,
           FI_MINOR_VERSION);
  for (const std::string& line : config_->describe()) {
    NNF_INFO(abi::kLogSubsysInit | abi::kLogSubsysEnv, "%s", line.c_str());
  }
  // EFA reads its variables when libfabric initialises it, during our first fi_getinfo.
  platform::applyEnvDefaults(platform::rulesFor(platform::Family::kEfa));

  cuda_.emplace(memory::CudaDriver::fromConfig(*config_));
  NNF_INFO(abi::kLogSubsysInit, "CUDA: %s", cuda_->reason().c_str());
  memory::GdrMode gdrMode = memory::gdrModeFromConfig(*config_);

  // Provider, protocol and devices: the decisions fabric-net-info prints (core/network_plan.h).
  PlanSources sources;
  sources.cudaUsable = [this](const config::Config&) { return cuda_->available(); };
  NetworkPlan network;
  try {
    network = planNetwork(*config_, sources);
  } catch (const PlanError& error) {
    error.warn();
    return error.result();
  }
  provider_ = network.choice.provider;

  preparePointerSupport(network.choice, gdrMode, network.devices);
  openDevices(network.devices);
  if (devices_.empty()) {
    NNF_WARN("provider %s offers no usable NIC", provider_.c_str());
    return abi::kSystemError;
  }
  publishDevices(network);
  return abi::kSuccess;
}

void Plugin::preparePointerSupport(const fabric::ProviderChoice& choice, memory::GdrMode gdrMode,
                                   DevicePlan& plan) {
  // Pointer support before the devices open; a device narrows it when its provider refuses an
  // option GPU buffers depend on (Device::openRails).
  platform::DmaBufInputs dmaBufInputs;
  dmaBufInputs.builtWithDmaBuf = NNF_HAVE_FI_MR_DMABUF != 0;
  dmaBufInputs.runtimeFiVersion = fi_version();
  dmaBufInputs.providerHmem = choice.hmem;
  dmaBufInputs.cudaDmaBufSupported = cuda_->dmaBufSupported(0);
  dmaBufInputs.kernel = platform::runningKernel();
  dmaBufInputs.disabled = config_->string(config::Param::kDmaBuf) == "off";
  platform::DmaBufDecision dmaBuf = platform::decideDmaBuf(dmaBufInputs);
  NNF_INFO(abi::kLogSubsysInit, "memory: %s", dmaBuf.reason.c_str());
  memory::PtrSupport ptrSupport =
      memory::decidePtrSupport({choice.hmem, cuda_->available(), dmaBuf.use, gdrMode});
  NNF_INFO(abi::kLogSubsysInit, "memory: ptrSupport=%d (%s)", ptrSupport.bits,
           ptrSupport.reason.c_str());
  for (DeviceSpec& spec : plan.specs) {
    spec.properties.ptrSupport = ptrSupport.bits;
    spec.cuda = cuda_->available() ? &*cuda_ : nullptr;
    spec.rmaRead = choice.rmaRead && (ptrSupport.bits & abi::kPtrCuda) != 0;
  }
}

void Plugin::openDevices(const DevicePlan& plan) {
  // A device that fails to open is skipped; the others still serve.
  for (const DeviceSpec& spec : plan.specs) {
    try {
      addDevice(spec,
                std::make_unique<FabricRails>(static_cast<int>(devices_.size()), spec, *config_));
    } catch (const std::exception& error) {
      NNF_WARN("skipping device %s: %s", spec.properties.name.c_str(), error.what());
    }
  }
}

void Plugin::publishDevices(const NetworkPlan& network) {
  // What the open devices really offer decides the rest: LL128 and the topology file's gdr.
  bool ll128Ok = true;
  bool gdr = true;
  for (const auto& device : devices_) {
    ll128Ok = ll128Ok && device->ll128Ok();
    gdr = gdr && (device->properties().ptrSupport & abi::kPtrCuda) != 0;
  }
  platform::applyProto(platform::decideProto(ll128Ok, getenv("NCCL_PROTO")));
  exportTopology(network.devices, gdr, network.carryingRails);
  const fabric::ProviderChoice& choice = network.choice;
  NNF_INFO(abi::kLogSubsysInit, "using provider %s (version %u.%u), protocol %s, %zu device(s)",
           provider_.c_str(), FI_MAJOR(choice.providerVersion), FI_MINOR(choice.providerVersion),
           devices_.front()->protocol().name(), devices_.size());
  for (const auto& device : devices_) logDevice(*device);
}

void Plugin::initWith(config::Config config) {
  std::lock_guard<std::mutex> lock(initMutex_);
  config_ = std::move(config);
  initDone_ = true;
  initResult_ = abi::kSuccess;
}

Device& Plugin::addDevice(const DeviceSpec& spec, std::unique_ptr<DeviceRails> rails) {
  devices_.push_back(std::make_unique<Device>(static_cast<int>(devices_.size()), spec,
                                              std::move(rails), *config_, protocols_));
  return *devices_.back();
}

abi::Result Plugin::deviceCount(int* count) {
  if (count == nullptr) {
    NNF_WARN("devices: NULL output pointer");
    return abi::kInternalError;
  }
  if (!initialized()) {
    NNF_WARN("devices called before a successful init");
    return abi::kInternalError;
  }
  *count = static_cast<int>(devices_.size());
  return abi::kSuccess;
}

Device* Plugin::device(int dev, const char* caller) {
  if (!initialized()) {
    NNF_WARN("%s called before a successful init", caller);
    return nullptr;
  }
  if (dev < 0 || static_cast<size_t>(dev) >= devices_.size()) {
    NNF_WARN("%s: device %d does not exist (%zu devices)", caller, dev, devices_.size());
    return nullptr;
  }
  return devices_[static_cast<size_t>(dev)].get();
}

abi::Result Plugin::properties(int dev, const DeviceProperties** out) {
  Device* device = this->device(dev, "getProperties");
  if (device == nullptr) return abi::kInternalError;
  if (out == nullptr) {
    NNF_WARN("getProperties: NULL output pointer");
    return abi::kInternalError;
  }
  *out = &device->properties();
  return abi::kSuccess;
}

void Plugin::track(const void* object) {
  std::lock_guard<std::mutex> lock(liveMutex_);
  live_.insert(object);
}

bool Plugin::untrack(const void* object) {
  std::lock_guard<std::mutex> lock(liveMutex_);
  return live_.erase(object) == 1;
}

bool Plugin::tracked(const void* object) {
  std::lock_guard<std::mutex> lock(liveMutex_);
  return live_.count(object) == 1;
}

}  // namespace nnf::core
