#include "support/known_failures.h"

#include <fnmatch.h>

#include <cstdlib>
#include <string>

namespace nnf::test {
namespace {

struct KnownFailure {
  const char* provider;  // NNF_TEST_PROVIDER, a glob ("softefa*")
  const char* test;  // the gtest full name (suite.test, with any instance and parameter), a glob
  const char* reason;
};

// What fails, where, and why (docs/efa.md, "What the real provider found").
constexpr KnownFailure kKnownFailures[] = {
    // Issue 24, defect 1: under rdma a small GPU message goes eagerly as one fi_writemsg of two
    // iovs, host header and GPU body (src/protocol/rdma_eager.cc sendEager -> Rail::writedata2,
    // src/fabric/rail.h); EFA emulates a two-iov write with packets, copying the payload with
    // desc[0]'s memory type (host) for every iov: ofi_memcpy of the GPU pointer, SIGSEGV in
    // efa_rdm_pke_init_payload_from_ope. Fix: eager only for host payloads, a single iov, or
    // where the provider answers mixed_hmem_iov.
    {"softefa+rdma*", "DeviceMemory.GpuToGpuTransfersOfEverySize",
     "issue 24 defect 1: GPU eager sends are a two-iov write that the efa provider emulates "
     "with a CPU copy of GPU memory (segfault)"},
    // Issue 24, defect 4: the rdma protocol writes a segment of up to 2 GiB
    // (kMaxSegmentBytes) as one fi_writedata; EFA cuts it at min(1 GiB, max_rdma_size) and each
    // piece raises a completion with the same immediate data at the target, so the receive
    // completes with the first 1 GiB (fabric-net-perf: "received 1073741824 bytes, expected
    // 1610612736"). Fix: segments capped at the provider's largest RMA size and at 1 GiB.
    {"softefa+rdma*", "LargeMessage.OneAndAHalfGiBLandsWhole",
     "issue 24 defect 4: a write over 1 GiB is cut by EFA into pieces that each complete the "
     "receive"},
};

}  // namespace

const char* knownFailure() {
  // NNF_RUN_KNOWN_FAILURES=1 runs them anyway (to see one fail, or pass once its fix is in).
  if (const char* run = std::getenv("NNF_RUN_KNOWN_FAILURES"); run != nullptr && *run == '1')
    return nullptr;
  const char* provider = std::getenv("NNF_TEST_PROVIDER");
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (provider == nullptr || info == nullptr) return nullptr;
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (const KnownFailure& known : kKnownFailures) {
    if (fnmatch(known.provider, provider, 0) == 0 && fnmatch(known.test, name.c_str(), 0) == 0)
      return known.reason;
  }
  return nullptr;
}

}  // namespace nnf::test
