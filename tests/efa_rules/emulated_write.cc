// Writes that EFA does not hand to the device as an RDMA write but emulates with packets
// (efa_rdm_rma_post_write): one with remote CQ data and more than one iov, local or remote
// (efa_rdm_rma_should_write_using_rdma); every write where the device has no RDMA write; and
// writes to peers that differ in RDMA-write or unsolicited-write support. The packets' payload is
// copied by the provider with the memory type of desc[0] for every iov
// (efa_rdm_pke_init_payload_from_ope; the efa provider does not advertise mixed_hmem_iov): host
// memory at desc[0] means a CPU memcpy of any GPU iov after it. The stand-in still moves the
// bytes through its base's RMA; what it checks is that the real provider could have copied them.
#include <cstdio>

#include "efa_rules.h"

namespace efa_rules {
namespace {

struct MemType {
  bool device = false;
  int deviceId = -1;  // -1: unknown (device memory the driver knows but no MR names)
};

// What EFA takes an iov's memory to be: its descriptor's registration where it has one; with
// none, host memory for desc[0] (EFA's FI_HMEM_SYSTEM default) and, for the others, what the
// memory really is (what the copy would touch).
MemType typeOf(const iovec& iov, void* desc, bool first) {
  MemType type;
  if (Mr* mr = desc != nullptr ? liveMr(desc) : nullptr) {
    type.device = mr->device;
    type.deviceId = mr->deviceId;
    return type;
  }
  if (!first)
    type.device = registeredAsDevice(iov.iov_base, iov.iov_len) || driverSaysDevice(iov.iov_base);
  return type;
}

// What the memory under an iov really is, whatever its descriptor says.
bool reallyDevice(const iovec& iov) {
  return registeredAsDevice(iov.iov_base, iov.iov_len) || driverSaysDevice(iov.iov_base);
}

bool sameType(const MemType& a, const MemType& b) {
  if (a.device != b.device) return false;
  return !a.device || a.deviceId < 0 || b.deviceId < 0 || a.deviceId == b.deviceId;
}

std::string describe(const MemType& type) {
  if (!type.device) return "host memory";
  return type.deviceId >= 0 ? "device memory of GPU " + std::to_string(type.deviceId)
                            : "device memory";
}

bool peerEmulated(Ep* ep, fi_addr_t dest) {
  const EmulatedPeers& peers = ep->domain->emulatePeer;
  if (!peers.any() || isOwnAddress(ep, dest)) return false;
  if (peers.all) return true;
  // One NIC: every peer is on NIC 0; with several, the peer's published NIC.
  int nic = ep->av != nullptr && loadConfig().nics > 1 ? nicOfPeer(ep->av, dest) : 0;
  return nic >= 0 && (peers.nics & (1u << nic)) != 0;
}

}  // namespace

std::string emulatedWriteMixesMemory(Ep* ep, const char* op, const iovec* iov, void* const* desc,
                                     size_t count, size_t rmaCount, bool withData, fi_addr_t dest) {
  const char* why = nullptr;
  if (withData && (count > 1 || rmaCount > 1))
    why = "a write with immediate data and more than one iov";
  else if (ep->domain->emulatedWrite)
    why = "a write on a device without RDMA write (NNF_EFA_RULES_EMULATED_WRITE)";
  else if (peerEmulated(ep, dest))
    why = "a write to a peer whose writes are emulated (NNF_EFA_RULES_EMULATE_PEER)";
  if (why == nullptr || count == 0) return "";
  note(Evidence::kEmulatedChecks);
  // desc[0] as the copy takes it; then every iov that carries bytes, desc[0]'s own included
  // (device memory behind a missing descriptor is copied as host memory).
  MemType first = typeOf(iov[0], desc != nullptr ? desc[0] : nullptr, true);
  for (size_t i = 0; i < count; ++i) {
    if (iov[i].iov_len == 0) continue;
    MemType type = i == 0 ? MemType{reallyDevice(iov[0]) || first.device, first.deviceId}
                          : typeOf(iov[i], desc != nullptr ? desc[i] : nullptr, false);
    if (sameType(first, type)) continue;
    char where[96];
    std::snprintf(where, sizeof(where), "iov %zu (%p, %zu bytes)", i, iov[i].iov_base,
                  iov[i].iov_len);
    std::string consequence = !first.device ? "the provider would copy device memory with the CPU"
                              : !type.device
                                  ? "the provider would copy host memory as device memory"
                                  : "the provider would copy it as another GPU's memory";
    return std::string(op) + ": " + why + " is emulated, and " + where + ", " + describe(type) +
           ", would be copied as desc[0]'s " + describe(first) + ": " + consequence;
  }
  return "";
}

}  // namespace efa_rules
