// A device's rails over libfabric, as the plugin opens them for each planned device: the leader
// rail (and, for the rdma protocol, the other carrying rails of its group), each with the
// endpoint options its provider's rules ask for (src/platform), one registrar per domain (a rail
// set over several), and the FabricEngine over them.
#pragma once

#include <memory>
#include <vector>

#include "config/config.h"
#include "core/device_rails.h"
#include "core/fabric_engine.h"
#include "fabric/rail.h"
#include "memory/fabric_registrar.h"
#include "memory/rail_set_registrar.h"

namespace nnf::core {

struct DeviceSpec;

class FabricRails final : public DeviceRails {
 public:
  // Opens the rails `spec` names for device `index`; throws std::runtime_error with the
  // libfabric error text, or when the provider cannot match our tags. Refused options narrow
  // the verdict (host memory only, no read flush, no LL128).
  FabricRails(int index, const DeviceSpec& spec, const config::Config& config);
  ~FabricRails() override;

  size_t railCount() const override { return rails_.size(); }
  const fabric::RailAttributes& rail(size_t index) const override { return *rails_[index]; }
  int insertAddress(size_t rail, const uint8_t* address, size_t length, fi_addr_t* out) override {
    return rails_[rail]->insertAddress(address, length, out);
  }
  int removeAddress(size_t rail, fi_addr_t address) override {
    return rails_[rail]->removeAddress(address);
  }
  bool takesBackPostedWritesSafely() const override;
  OperationEngine& engine() override { return *engine_; }
  memory::Registrar& leaderRegistrar() override { return *registrars_.front(); }
  memory::Registrar& dataRegistrar() override {
    return railSet_ ? static_cast<memory::Registrar&>(*railSet_) : *registrars_.front();
  }
  RailVerdict verdict() const override { return verdict_; }
  void close() override;

 private:
  void openRails(const DeviceSpec& spec);

  std::vector<std::unique_ptr<fabric::Rail>> rails_;
  // One per rail, leader first; rails after the leader register every buffer too, through one
  // rail set (rdma only).
  std::vector<std::unique_ptr<memory::FabricRegistrar>> registrars_;
  std::unique_ptr<memory::RailSetRegistrar> railSet_;
  std::unique_ptr<FabricEngine> engine_;
  RailVerdict verdict_;
  bool deliversInOrder_ = false;
};

}  // namespace nnf::core
