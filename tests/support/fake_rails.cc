#include "support/fake_rails.h"

#include <rdma/fi_errno.h>

#include <gtest/gtest.h>

#include <cstring>

#include "platform/provider_rules.h"

namespace nnf::test {
namespace {
constexpr uint32_t kAddressMagic = 0x454b4146;  // "FAKE"
}  // namespace

FakeRailSpec FakeRailSpec::shm() {
  FakeRailSpec spec;
  spec.provider = "shm";
  spec.cqDataSize = 8;
  spec.injectSize = 4096;
  spec.localRegistration = false;
  spec.deliversInOrder = true;
  return spec;
}

FakeRailSpec FakeRailSpec::tcp() {
  FakeRailSpec spec = shm();  // the same rules, but a smaller inject size
  spec.provider = "tcp";
  spec.injectSize = 64;
  return spec;
}

FakeRailSpec FakeRailSpec::efa() {
  return FakeRailSpec{};
}

std::vector<uint8_t> fakeAddress(size_t engine, size_t rail) {
  std::vector<uint8_t> bytes(8);
  uint16_t id = static_cast<uint16_t>(engine);
  uint16_t index = static_cast<uint16_t>(rail);
  memcpy(bytes.data(), &kAddressMagic, 4);
  memcpy(bytes.data() + 4, &id, 2);
  memcpy(bytes.data() + 6, &index, 2);
  return bytes;
}

bool parseFakeAddress(const uint8_t* address, size_t length, size_t* engine, size_t* rail) {
  uint32_t magic = 0;
  uint16_t id = 0;
  uint16_t index = 0;
  if (length != 8) return false;
  memcpy(&magic, address, 4);
  memcpy(&id, address + 4, 2);
  memcpy(&index, address + 6, 2);
  *engine = id;
  *rail = index;
  return magic == kAddressMagic;
}

FakeKeys::Record* FakeKeys::add(const void* base, size_t length, uint64_t access, size_t rail) {
  uint64_t key = next_++;
  Record& record = byKey_[key];
  record = Record{static_cast<const uint8_t*>(base), length, access, rail, key};
  descs_.insert(&record);
  return &record;
}

void FakeKeys::remove(uint64_t key) {
  auto it = byKey_.find(key);
  if (it == byKey_.end()) {
    ADD_FAILURE() << "deregistering key " << key << ", which is not registered";
    return;
  }
  descs_.erase(&it->second);
  byKey_.erase(it);
}

const FakeKeys::Record* FakeKeys::find(uint64_t key) const {
  auto it = byKey_.find(key);
  return it == byKey_.end() ? nullptr : &it->second;
}

bool FakeKeys::covers(const void* desc, size_t rail, const void* buffer, size_t length) const {
  if (descs_.count(desc) == 0) return false;
  const auto* record = static_cast<const Record*>(desc);
  const auto* bytes = static_cast<const uint8_t*>(buffer);
  return record->rail == rail && bytes >= record->base &&
         bytes + length <= record->base + record->length;
}

bool FakeKeys::allows(uint64_t key, size_t rail, uint64_t address, size_t length,
                      uint64_t access) const {
  const Record* record = find(key);
  const auto* bytes = reinterpret_cast<const uint8_t*>(address);
  return record != nullptr && record->rail == rail && (record->access & access) == access &&
         bytes >= record->base && bytes + length <= record->base + record->length;
}

int FakeRegistrar::registerRegion(const memory::Region& region, memory::Registration* out) {
  *out = memory::Registration{};
  out->base = region.base;
  out->length = region.length;
  out->remoteBase = reinterpret_cast<uintptr_t>(region.base);
  for (size_t r = 0; r < rails_; ++r) {
    FakeKeys::Record* record = keys_.add(region.base, region.length, region.access, r);
    if (r == 0) {
      out->desc = record;
      out->key = record->key;
      out->provider = record;
    } else {
      out->rails[r - 1] = memory::Registration::Rail{record, record->key, record};
    }
  }
  out->railCount = static_cast<uint8_t>(rails_);
  return 0;
}

int FakeRegistrar::deregister(memory::Registration& registration) {
  for (size_t r = 0; r < registration.railCount; ++r) keys_.remove(registration.keyOf(r));
  registration.provider = nullptr;
  return 0;
}

FakeRail::FakeRail(const FakeRailSpec& spec, std::vector<uint8_t> address)
    : provider_(spec.provider),
      domain_("fake_" + spec.provider),
      address_(std::move(address)),
      maxRmaBytes_(spec.maxRmaBytes) {
  fabricAttr_.prov_name = provider_.data();
  fabricAttr_.name = domain_.data();
  domainAttr_.name = domain_.data();
  domainAttr_.cq_data_size = spec.cqDataSize;
  domainAttr_.mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED |
                        (spec.localRegistration ? FI_MR_LOCAL : 0);
  domainAttr_.mr_key_size = 8;
  epAttr_.type = FI_EP_RDM;
  epAttr_.mem_tag_format = 0;  // every bit matched
  txAttr_.inject_size = spec.injectSize;
  txAttr_.iov_limit = 4;
  txAttr_.rma_iov_limit = 1;
  txAttr_.size = spec.queueSize;
  rxAttr_.iov_limit = 4;
  rxAttr_.size = spec.queueSize;
  info_.caps = FI_TAGGED | FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
               FI_LOCAL_COMM | FI_REMOTE_COMM;
  info_.addr_format = FI_FORMAT_UNSPEC;
  info_.fabric_attr = &fabricAttr_;
  info_.domain_attr = &domainAttr_;
  info_.ep_attr = &epAttr_;
  info_.tx_attr = &txAttr_;
  info_.rx_attr = &rxAttr_;
}

int FakeRail::sizeOption(int level, int name, size_t* out) const {
  if (level != platform::opt::kLevelEndpoint || name != platform::opt::kMaxRmaSize ||
      maxRmaBytes_ == 0) {
    return -FI_ENOPROTOOPT;
  }
  *out = maxRmaBytes_;
  return 0;
}

}  // namespace nnf::test
