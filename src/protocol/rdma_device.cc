#include "protocol/rdma_device.h"

#include <algorithm>

#include "config/config.h"
#include "core/device.h"
#include "log/log.h"
#include "platform/endpoint_options.h"
#include "platform/provider_rules.h"
#include "protocol/rdma_eager.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol {

RdmaDevice::RdmaDevice(core::Device& device, DeviceSetup& setup) : device_(device) {
  immediateLength_ = true;
  for (size_t r = 0; r < device.railCount(); ++r) {
    immediateLength_ = immediateLength_ && device.rail(r).cqDataSize() >= 8;
  }
  // Segments of at most 2 GiB and of what the provider writes as one (EFA cuts a larger write
  // into pieces that each carry the immediate), at most 31 of them over every rail.
  writeSegmentBytes_ = rdma::kMaxSegmentBytes;
  const platform::ProviderRules& rules = platform::rulesFor(platform::familyOf(device.provider()));
  if (rules.largestWriteBytes > 0) {
    writeSegmentBytes_ = std::min<uint64_t>(writeSegmentBytes_, rules.largestWriteBytes);
  }
  for (size_t r = 0; r < device.railCount(); ++r) {
    size_t largest = 0;
    if (device.rail(r).sizeOption(platform::opt::kLevelEndpoint, platform::opt::kMaxRmaSize,
                                  &largest) == 0 &&
        largest > 0) {
      writeSegmentBytes_ = std::min<uint64_t>(writeSegmentBytes_, largest);
    }
  }
  setup.limitMessageBytes(
      static_cast<size_t>((rdma::kMaxSegments - rdma::kMaxRails) * writeSegmentBytes_));
  NNF_INFO(abi::kLogSubsysInit, "%s: RMA writes in segments of at most %llu bytes",
           device.properties().name.c_str(), static_cast<unsigned long long>(writeSegmentBytes_));
  stripeMinBytes_ = static_cast<size_t>(device.config().integer(config::Param::kStripeMin));
}

void RdmaDevice::start() {
  injectScratch_.resize(device_.injectLimit());
  // On every rail: descriptor and credit writes go on any of them (rail r with the rail-r key).
  ringArena_ =
      std::make_unique<core::ControlArena>(&device_.everyRailRegistrar(), rdma::kArenaSlotBytes,
                                           FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE);
  setUpEager();
}

void RdmaDevice::release() {
  if (ringArena_) ringArena_->deregisterAll();
  if (eagerArena_) eagerArena_->deregisterAll();
}

void RdmaDevice::setUpEager() {
  const config::Config& config = device_.config();
  const char* name = device_.properties().name.c_str();
  const platform::ProviderRules& rules = platform::rulesFor(platform::familyOf(device_.provider()));
  eagerMaxBytes_ = config.userSet(config::Param::kEagerMax)
                       ? static_cast<size_t>(config.integer(config::Param::kEagerMax))
                       : rules.eagerMaxBytes;
  eagerFromGpuMemory_ = rules.writesMixedMemoryIovs;
  if (rules.writesWaitForTarget) {
    // Only inline writes complete while the receiver does not progress (busy elsewhere): the
    // very case eager messages are for. In order, the header may go inline ahead of the message
    // (protocol/rdma_eager_sender.cc), which then takes the whole inject size (4 KiB on shm).
    size_t header = sizeof(rdma::EagerHeader);
    size_t injectLimit = device_.injectLimit();
    size_t inlineMax = device_.deliversInOrder() ? injectLimit
                       : injectLimit > header    ? injectLimit - header
                                                 : 0;
    eagerMaxBytes_ = std::min(eagerMaxBytes_, inlineMax);
  }
  const fi_tx_attr* tx = device_.rail().info()->tx_attr;
  if (eagerMaxBytes_ > 0 && tx != nullptr && tx->rma_iov_limit != 0 && tx->iov_limit < 2) {
    // The header and the message go as one write of two local buffers.
    NNF_INFO(abi::kLogSubsysInit, "%s: no eager messages (the provider writes from one buffer)",
             name);
    eagerMaxBytes_ = 0;
  }
  bool rmaRead = device_.rmaRead();
  if (eagerMaxBytes_ > 0 && (device_.properties().ptrSupport & abi::kPtrCuda) != 0 && !rmaRead) {
    // An eager message for a GPU buffer is copied out of its entry by a read from our own
    // endpoint, which this device cannot do (the flush reads are off too).
    NNF_INFO(abi::kLogSubsysInit,
             "%s: no eager messages (GPU buffers could not be filled from bounce entries)", name);
    eagerMaxBytes_ = 0;
  }
  if (eagerMaxBytes_ == 0) return;
  // Few areas a chunk: each is 64 entries (about 520 KiB at 8 KiB), and EFA pins what it
  // registers. Remote reads: a GPU buffer's copy out of an entry is a read from our endpoint.
  // On every rail: the sender spreads its eager messages over them.
  eagerArena_ = std::make_unique<core::ControlArena>(
      &device_.everyRailRegistrar(), rdma::bounceBytes(eagerMaxBytes_),
      FI_WRITE | FI_REMOTE_WRITE | (rmaRead ? FI_REMOTE_READ : 0), /*slotsPerChunk=*/4);
  NNF_INFO(abi::kLogSubsysInit, "%s: rdma messages up to %zu bytes go eagerly (%u entries a comm)",
           name, eagerMaxBytes_, rdma::kEagerEntries);
}

}  // namespace nnf::protocol
