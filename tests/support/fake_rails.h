// The in-memory fabric's rails (support/fake_fabric.h): what a rail claims to be (FakeRail, from
// a FakeRailSpec), and the registrations of one device (FakeKeys), handed out by FakeRegistrar
// and checked by the engine on every access.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fabric/rail_attributes.h"
#include "memory/region.h"

namespace nnf::test {

// What a fake rail claims to be: its provider's name picks the platform rules the device and the
// protocols follow (platform/provider_rules.h).
struct FakeRailSpec {
  std::string provider = "efa";
  size_t cqDataSize = 4;          // bytes of immediate data carried
  size_t injectSize = 32;         // 0: no inject
  bool localRegistration = true;  // FI_MR_LOCAL: local buffers need their descriptor
  size_t maxRmaBytes = 0;         // FI_OPT_MAX_RMA_SIZE (0: the option is not answered)
  size_t queueSize = 1024;        // rx_attr->size, tx_attr->size
  // An in-order provider (shm, tcp): the engine reports deliversInOrder(), and the fabric must
  // then keep the per-rail order of deliveries (FakeFabricOptions::inOrder).
  bool deliversInOrder = false;

  // The three families the protocols tell apart: shm (in order, 8-byte immediates, writes wait
  // for the target: eager within the inject size), tcp (in order, 8-byte immediates) and efa
  // (unordered, 4-byte immediates, descriptors required).
  static FakeRailSpec shm();
  static FakeRailSpec tcp();
  static FakeRailSpec efa();
};

// A fake endpoint's address: which engine of the fabric, which of its rails.
std::vector<uint8_t> fakeAddress(size_t engine, size_t rail);
bool parseFakeAddress(const uint8_t* address, size_t length, size_t* engine, size_t* rail);

// A device's registrations: keys, what they cover, on which rail, with which access.
class FakeKeys {
 public:
  struct Record {
    const uint8_t* base = nullptr;
    size_t length = 0;
    uint64_t access = 0;
    size_t rail = 0;
    uint64_t key = 0;
  };
  Record* add(const void* base, size_t length, uint64_t access, size_t rail);
  void remove(uint64_t key);
  const Record* find(uint64_t key) const;
  // Whether `desc` is a live record's, for rail `rail`, covering [buffer, buffer + length).
  bool covers(const void* desc, size_t rail, const void* buffer, size_t length) const;
  // Whether key `key` lets rail `rail` reach [address, address + length) with `access`.
  bool allows(uint64_t key, size_t rail, uint64_t address, size_t length, uint64_t access) const;
  size_t live() const { return byKey_.size(); }

 private:
  std::unordered_map<uint64_t, Record> byKey_;
  std::unordered_set<const void*> descs_;
  uint64_t next_ = 0x100;
};

class FakeRegistrar final : public memory::Registrar {
 public:
  // Registers each region on `rails` rails (the leader's registrar: 1), addressed by its virtual
  // address (FI_MR_VIRT_ADDR), a key and a descriptor for each.
  FakeRegistrar(FakeKeys& keys, size_t rails) : keys_(keys), rails_(rails) {}
  int registerRegion(const memory::Region& region, memory::Registration* out) override;
  int deregister(memory::Registration& registration) override;

 private:
  FakeKeys& keys_;
  size_t rails_;
};

class FakeRail final : public fabric::RailAttributes {
 public:
  FakeRail(const FakeRailSpec& spec, std::vector<uint8_t> address);
  FakeRail(const FakeRail&) = delete;
  FakeRail& operator=(const FakeRail&) = delete;
  const fi_info* info() const override { return &info_; }
  const std::vector<uint8_t>& address() const override { return address_; }
  int sizeOption(int level, int name, size_t* out) const override;

 private:
  fi_info info_{};
  fi_fabric_attr fabricAttr_{};
  fi_domain_attr domainAttr_{};
  fi_ep_attr epAttr_{};
  fi_tx_attr txAttr_{};
  fi_rx_attr rxAttr_{};
  std::string provider_;
  std::string domain_;
  std::vector<uint8_t> address_;
  size_t maxRmaBytes_;
};

}  // namespace nnf::test
