#include "info_list.h"

#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace nnf::tools {
namespace {

char* copyOf(const std::string& text) {
  char* copy = strdup(text.c_str());
  if (copy == nullptr) throw std::runtime_error("out of memory building an fi_info");
  return copy;
}

// A fid_nic libfabric can close and duplicate: fi_freeinfo closes an entry's nic through its
// ops, and fi_dupinfo duplicates it with fi_control(FI_DUP). Plain C members only, with the
// fid_nic first, so that the fid libfabric holds is this object's address.
struct HandNic {
  fid_nic nic;
  fi_device_attr device;
  fi_bus_attr bus;
  fi_link_attr link;
};

int closeNic(fid* nic);
int controlNic(fid* nic, int command, void* arg);

fi_ops kNicOps = {sizeof(fi_ops), closeNic, nullptr, controlNic, nullptr, nullptr, nullptr};

HandNic* newNic(const char* device, const fi_bus_attr* bus, const fi_link_attr* link) {
  auto* hand = static_cast<HandNic*>(calloc(1, sizeof(HandNic)));
  if (hand == nullptr) throw std::runtime_error("out of memory building an fi_info");
  hand->nic.fid.fclass = FI_CLASS_NIC;
  hand->nic.fid.ops = &kNicOps;
  hand->nic.device_attr = &hand->device;
  hand->nic.bus_attr = &hand->bus;
  hand->nic.link_attr = &hand->link;
  hand->device.name = device != nullptr ? strdup(device) : nullptr;
  hand->bus = *bus;
  hand->link.speed = link->speed;
  return hand;
}

int closeNic(fid* nic) {
  auto* hand = reinterpret_cast<HandNic*>(nic);
  free(hand->device.name);
  free(hand);
  return 0;
}

int controlNic(fid* nic, int command, void* arg) {
  if (command != FI_DUP) return -FI_ENOSYS;
  const auto* hand = reinterpret_cast<const HandNic*>(nic);
  try {
    *static_cast<fid_nic**>(arg) = &newNic(hand->device.name, &hand->bus, &hand->link)->nic;
  } catch (const std::exception&) {
    return -FI_ENOMEM;
  }
  return 0;
}

void fill(fi_info* info, const InfoEntry& entry) {
  info->caps = entry.caps;
  info->ep_attr->type = FI_EP_RDM;
  info->ep_attr->max_msg_size = entry.maxMsgSize;
  info->domain_attr->name = copyOf(entry.domain);
  info->domain_attr->cq_data_size = entry.cqDataSize;
  info->fabric_attr->name = copyOf(entry.fabric.empty() ? entry.provider : entry.fabric);
  info->fabric_attr->prov_name = copyOf(entry.provider);
  info->fabric_attr->prov_version = entry.providerVersion;
  if (!entry.device.empty() || entry.pci || entry.speedBps != 0) {
    fi_bus_attr bus{};
    bus.bus_type = FI_BUS_UNKNOWN;
    if (entry.pci) {
      bus.bus_type = FI_BUS_PCI;
      bus.attr.pci.domain_id = static_cast<uint16_t>(entry.pci->domain);
      bus.attr.pci.bus_id = static_cast<uint8_t>(entry.pci->bus);
      bus.attr.pci.device_id = static_cast<uint8_t>(entry.pci->device);
      bus.attr.pci.function_id = static_cast<uint8_t>(entry.pci->function);
    }
    fi_link_attr link{};
    link.speed = entry.speedBps;
    info->nic = &newNic(entry.device.empty() ? nullptr : entry.device.c_str(), &bus, &link)->nic;
  }
}

fi_info* makeInfo(const InfoEntry& entry) {
  fi_info* info = fi_allocinfo();
  if (info == nullptr) throw std::runtime_error("fi_allocinfo failed");
  try {
    fill(info, entry);
  } catch (...) {
    fi_freeinfo(info);
    throw;
  }
  return info;
}

}  // namespace

fabric::InfoPtr makeInfoList(const std::vector<InfoEntry>& entries) {
  fabric::InfoPtr head;
  fi_info* tail = nullptr;
  for (const InfoEntry& entry : entries) {
    fi_info* info = makeInfo(entry);
    if (tail == nullptr) {
      head = fabric::InfoPtr(info);
    } else {
      tail->next = info;
    }
    tail = info;
  }
  return head;
}

fabric::InfoQuery queryFrom(std::vector<InfoEntry> entries) {
  return [entries = std::move(entries)](const fi_info& hints) {
    std::vector<InfoEntry> matching;
    const char* wanted = hints.fabric_attr != nullptr ? hints.fabric_attr->prov_name : nullptr;
    for (const InfoEntry& entry : entries) {
      if (wanted != nullptr && !fabric::providerMatches(wanted, entry.provider)) continue;
      if ((hints.caps & ~entry.caps) != 0) continue;
      matching.push_back(entry);
    }
    return makeInfoList(matching);
  };
}

}  // namespace nnf::tools
