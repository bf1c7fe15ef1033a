// FabricRegistrar against real libfabric domains (shm and tcp;ofi_rxm): registrations succeed
// with the keys and descriptors mr_mode calls for, and bad requests come back as error codes.
#include "memory/fabric_registrar.h"

#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "memory/mr_cache.h"
#include "support/recording_registrar.h"

namespace nnf::memory {
namespace {

using test::RecordingRegistrar;

struct Variant {
  const char* provider;
  bool hmem;        // ask for FI_HMEM (and accept FI_MR_HMEM)
  uint64_t mrMode;  // the mr_mode bits we tell the provider we can handle
};

std::string variantName(const testing::TestParamInfo<Variant>& info) {
  std::string name = info.param.provider;
  name += info.param.hmem ? "_hmem" : "_host";
  name += info.param.mrMode & FI_MR_PROV_KEY ? "_provkey" : "_appkey";
  return name;
}

class FabricRegistrarTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    setenv("FI_TCP_IFACE", "lo", 0);
    const Variant& variant = GetParam();
    fi_info* hints = fi_allocinfo();
    ASSERT_NE(hints, nullptr);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED | FI_RMA | (variant.hmem ? FI_HMEM : 0);
    hints->domain_attr->mr_mode =
        static_cast<int>(variant.mrMode | (variant.hmem ? FI_MR_HMEM : 0));
    hints->fabric_attr->prov_name = strdup(variant.provider);
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (rc != 0 || info_ == nullptr) {
      GTEST_SKIP() << variant.provider
                   << " offers no matching RDM endpoint here: " << fi_strerror(-rc);
    }
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric_, info_, &domain_, nullptr), 0);
  }

  void TearDown() override {
    if (domain_ != nullptr) {
      EXPECT_EQ(fi_close(&domain_->fid), 0);
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
    if (info_ != nullptr) fi_freeinfo(info_);
  }

  Region hostRegion(const std::vector<char>& buffer) const {
    Region region;
    region.base = buffer.data();
    region.length = buffer.size();
    region.access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    return region;
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  nnf::fabric::DomainLock domainLock_;
};

TEST_P(FabricRegistrarTest, RegistersHostMemoryWithTheKeysMrModeAsksFor) {
  FabricRegistrar registrar(domain_, info_, domainLock_);
  EXPECT_EQ(registrar.providerHasHmem(), (info_->caps & FI_HMEM) != 0);
  std::vector<char> first(64 * 1024), second(4096);
  Registration a, b;
  ASSERT_EQ(registrar.registerRegion(hostRegion(first), &a), 0);
  ASSERT_EQ(registrar.registerRegion(hostRegion(second), &b), 0);
  auto* mrA = static_cast<fid_mr*>(a.provider);
  ASSERT_NE(mrA, nullptr);
  EXPECT_EQ(a.desc, fi_mr_desc(mrA));
  EXPECT_EQ(a.base, first.data());
  EXPECT_EQ(a.length, first.size());
  EXPECT_EQ(a.key, fi_mr_key(mrA));
  EXPECT_NE(a.key, b.key);
  if (!registrar.providerKeys()) {
    EXPECT_EQ(a.key, 1u);  // our own keys, counted from 1
    EXPECT_EQ(b.key, 2u);
  }
  if (registrar.virtualAddressing()) {
    EXPECT_EQ(a.remoteBase, reinterpret_cast<uint64_t>(first.data()));
    EXPECT_EQ(a.remoteAddress(first.data() + 100), reinterpret_cast<uint64_t>(first.data()) + 100);
  } else {
    EXPECT_EQ(a.remoteBase, 0u);
    EXPECT_EQ(a.remoteAddress(first.data() + 100), 100u);
  }
  ASSERT_EQ(registrar.deregister(a), 0);
  EXPECT_EQ(a.provider, nullptr);
  // A released application key is handed out again rather than growing the key space.
  Registration c;
  ASSERT_EQ(registrar.registerRegion(hostRegion(first), &c), 0);
  if (!registrar.providerKeys()) {
    EXPECT_EQ(c.key, 1u);
  }
  EXPECT_EQ(registrar.deregister(b), 0);
  EXPECT_EQ(registrar.deregister(c), 0);
  EXPECT_EQ(registrar.deregister(c), -FI_EINVAL);  // already released
}

TEST_P(FabricRegistrarTest, InvalidRegionsAreRefusedWithErrorCodes) {
  FabricRegistrar registrar(domain_, info_, domainLock_);
  std::vector<char> buffer(4096);
  Registration out;
  Region region = hostRegion(buffer);
  region.base = nullptr;
  EXPECT_EQ(registrar.registerRegion(region, &out), -FI_EINVAL);
  region = hostRegion(buffer);
  region.length = 0;
  EXPECT_EQ(registrar.registerRegion(region, &out), -FI_EINVAL);
  region = hostRegion(buffer);
  region.type = static_cast<MemType>(42);  // an interface this build does not know
  EXPECT_EQ(registrar.registerRegion(region, &out), -FI_EINVAL);
  region = hostRegion(buffer);
  region.type = MemType::kCuda;
  region.device = -1;
  EXPECT_EQ(registrar.registerRegion(region, &out), -FI_EINVAL);
  region.type = MemType::kDmaBuf;
  region.device = 0;
  region.dmabufFd = -1;
  // Without FI_MR_DMABUF in this libfabric (or FI_HMEM in the provider) this is unsupported;
  // with both, the bad descriptor is the problem.
  int expected = NNF_HAVE_FI_MR_DMABUF && registrar.providerHasHmem() ? -FI_EBADF : -FI_EOPNOTSUPP;
  EXPECT_EQ(registrar.registerRegion(region, &out), expected);
  EXPECT_EQ(out.provider, nullptr);
}

TEST_P(FabricRegistrarTest, CudaMemoryNeedsAnHmemProviderAndWorkingCuda) {
  FabricRegistrar registrar(domain_, info_, domainLock_);
  std::vector<char> buffer(4096);
  Region region = hostRegion(buffer);
  region.type = MemType::kCuda;
  region.device = 0;
  Registration out;
  int rc = registrar.registerRegion(region, &out);
  if (!registrar.providerHasHmem()) {
    EXPECT_EQ(rc, -FI_EOPNOTSUPP);
  } else {
    // Host memory presented as CUDA memory: the provider's CUDA support (absent or unusable
    // without a GPU here) must refuse it with an error code, never crash.
    EXPECT_LT(rc, 0) << "provider accepted host memory as FI_HMEM_CUDA";
  }
  EXPECT_EQ(out.provider, nullptr);
}

TEST_P(FabricRegistrarTest, EndpointModeWithoutEndpointIsRefused) {
  fi_info* copy = fi_dupinfo(info_);
  ASSERT_NE(copy, nullptr);
  copy->domain_attr->mr_mode |= FI_MR_ENDPOINT;
  FabricRegistrar registrar(domain_, copy, domainLock_);
  fi_freeinfo(copy);
  EXPECT_TRUE(registrar.needsEndpoint());
  std::vector<char> buffer(4096);
  Registration out;
  EXPECT_EQ(registrar.registerRegion(hostRegion(buffer), &out), -FI_EINVAL);
}

TEST_P(FabricRegistrarTest, ConstructionNeedsADomain) {
  EXPECT_THROW(FabricRegistrar(nullptr, info_, domainLock_), std::invalid_argument);
  EXPECT_THROW(FabricRegistrar(domain_, nullptr, domainLock_), std::invalid_argument);
}

TEST_P(FabricRegistrarTest, CacheOverARealDomainSharesRegistrations) {
  FabricRegistrar fabric(domain_, info_, domainLock_);
  RecordingRegistrar recorder(&fabric);
  MrCacheOptions options;
  options.maxKeptEntries = 4;
  std::vector<char> buffer(1 << 20);
  {
    MrCache cache(recorder, options);
    MrHandle* whole = nullptr;
    MrHandle* part = nullptr;
    ASSERT_EQ(cache.acquire(hostRegion(buffer), &whole), 0);
    Region sub = hostRegion(buffer);
    sub.base = buffer.data() + 12345;
    sub.length = 1000;
    ASSERT_EQ(cache.acquire(sub, &part), 0);
    EXPECT_EQ(part, whole);
    EXPECT_EQ(recorder.registrations(), 1u);
    auto* mr = static_cast<fid_mr*>(whole->registration().provider);
    EXPECT_EQ(whole->registration().key, fi_mr_key(mr));
    EXPECT_EQ(cache.release(part), 0);
    EXPECT_EQ(cache.release(whole), 0);
    EXPECT_EQ(cache.stats().kept, 1u);
  }
  EXPECT_EQ(recorder.live(), 0);  // the cache's destructor closed the kept registration
}

INSTANTIATE_TEST_SUITE_P(
    Providers, FabricRegistrarTest,
    ::testing::Values(
        Variant{"shm", false, FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_LOCAL},
        Variant{"shm", true, FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_LOCAL},
        Variant{"tcp", false, 0}, Variant{"tcp", false, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY}),
    variantName);

}  // namespace
}  // namespace nnf::memory
