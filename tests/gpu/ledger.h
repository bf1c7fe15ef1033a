// What the GPU check's processes proved, gathered for its verdict: receivers append the bytes
// they set out to check and those they compared byte for byte after the transfer, every process
// appends its failures. A file
// (NNF_GPU_CHECK_LEDGER), because the transfers run in forked children whose gtest results the
// parent only sees as exit statuses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace nnf::test::gpu {

enum class Moved { kGpuToGpu, kGpuToHost, kHostToGpu };

// Parent, before any test: a fresh ledger file, named in the environment the children inherit.
void startLedger();
// A receiver, before it posts a receive: the bytes it is about to check.
void recordExpected(Moved kind, uint64_t bytes);
// Bytes of one message found intact where they were received.
void recordVerified(Moved kind, uint64_t bytes);

struct LedgerTotals {
  uint64_t gpuToGpu = 0;
  uint64_t gpuToHost = 0;
  uint64_t hostToGpu = 0;
  uint64_t gpuMessages = 0;           // GPU-to-GPU messages of at least one byte
  uint64_t expected = 0;              // bytes the receivers set out to check, all kinds
  uint64_t verified = 0;              // bytes they found intact, all kinds
  std::vector<std::string> failures;  // "<test>: <first line of the failure>"
};
LedgerTotals readLedger();

// Appends every failed assertion of the process it runs in (the children inherit it from the
// parent) to the ledger, with its test's name.
class FailureRecorder : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& test) override;
  void OnTestPartResult(const ::testing::TestPartResult& result) override;

 private:
  // Kept from OnTestStart: gtest holds its own lock while it reports a part result.
  std::string test_ = "(outside a test)";
};

}  // namespace nnf::test::gpu
