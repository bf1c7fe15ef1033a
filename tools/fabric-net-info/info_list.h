// fi_info entries made by hand, for the NICs of a machine that is not this one: an hwloc dump
// (fabric-net-info --topology) or a test's fake provider list. Each is an fi_info that
// fi_dupinfo and fi_freeinfo handle as libfabric's own, nic included, so that the plugin's
// provider selection (fabric::selectProvider) runs on them unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fabric/fid.h"
#include "fabric/provider.h"
#include "topology/pci_address.h"

namespace nnf::tools {

struct InfoEntry {
  std::string provider;  // fabric_attr->prov_name, e.g. "efa", "tcp;ofi_rxm"
  std::string fabric;    // fabric_attr->name
  std::string domain;    // domain_attr->name: the NIC's name to the plugin
  // nic->device_attr->name; the entry has a nic when this, `pci` or `speedBps` is set.
  std::string device;
  std::optional<topology::PciAddress> pci;  // nic->bus_attr, FI_BUS_PCI
  uint64_t speedBps = 0;                    // nic->link_attr->speed
  uint64_t caps = 0;
  size_t cqDataSize = 0;  // domain_attr->cq_data_size (rdma needs 4 bytes)
  size_t maxMsgSize = 0;  // ep_attr->max_msg_size
  uint32_t providerVersion = 0;
};

// One fi_info chain, in the entries' order.
fabric::InfoPtr makeInfoList(const std::vector<InfoEntry>& entries);

// Answers fi_getinfo from `entries` as a provider would: those of the hints' provider (every one
// when the hints name none) that have every capability the hints ask for, in order; an empty
// InfoPtr when none has.
fabric::InfoQuery queryFrom(std::vector<InfoEntry> entries);

}  // namespace nnf::tools
