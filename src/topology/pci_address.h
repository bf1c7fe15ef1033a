// A PCI function address (domain:bus:device.function), the key that joins libfabric's NIC list,
// hwloc objects, sysfs paths and NCCL's topology XML.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

namespace nnf::topology {

struct PciAddress {
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;
  uint32_t function = 0;

  // Accepts "dddd:bb:dd.f" and the domain-less "bb:dd.f" (domain 0), hex digits in either case.
  // Returns nullopt on anything else, including out-of-range fields (bus > 0xff, device > 0x1f,
  // function > 7).
  static std::optional<PciAddress> parse(const std::string& text);

  // Always "dddd:bb:dd.f", lowercase hex, the form Linux uses in /sys/bus/pci/devices.
  std::string str() const;

  auto key() const { return std::tie(domain, bus, device, function); }
  bool operator==(const PciAddress& o) const { return key() == o.key(); }
  bool operator!=(const PciAddress& o) const { return key() != o.key(); }
  bool operator<(const PciAddress& o) const { return key() < o.key(); }
};

}  // namespace nnf::topology
