// Where tests find their inputs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace nnf::test {

// ../shared/fixtures beside the checkout (or NNF_SHARED_FIXTURES), "" when absent: tests that
// need it skip with a message.
std::string sharedFixturesDir();

// The provider the test runs on (NNF_TEST_PROVIDER, else FI_PROVIDER), "" when unset.
std::string testProvider();
// The data protocol the tests run under: NCCL_FABRIC_PROTOCOL, "auto" when unset.
std::string testProtocol();

// The fake CUDA driver for GPU-memory tests: NNF_FAKE_CUDA_LIBRARY, else the library built beside
// the test binaries (build/tests/fake_cuda/libnnf_fake_cuda.so).
std::string fakeCudaLibrary();

// The project's source tree (for its own fixtures under tests/fixtures).
std::string sourceDir();

// Points libfabric (and the plugin) at `provider` in this process and the children it forks:
//   shm, tcp: FI_PROVIDER narrows libfabric to it (tcp stays on loopback);
//   efa:      our EFA-rules provider (tests/efa_rules) over tcp, loaded through
//             FI_PROVIDER_PATH and chosen with NCCL_FABRIC_PROVIDER (FI_PROVIDER would hide the
//             provider underneath), with the fake CUDA driver so GPU buffers take the GPU path,
//             completions reordered, and every rule violation appended to efaRulesReport().
// `provider` may name a protocol too: "shm+rdma" sets NCCL_FABRIC_PROTOCOL=rdma; without one,
// sendrecv (auto would pick rdma on shm, tcp and the EFA-rules provider alike; protocol_test
// checks that choice); a NCCL_FABRIC_PROTOCOL already set is kept either way; and,
// on efa only, a rail count: "efa+rdma+2rails" (or NNF_TEST_RAILS=2 beside "efa+rdma") sets
// NNF_TEST_RAILS=2, has the EFA-rules provider present two NICs (NNF_EFA_RULES_NICS=2) and
// groups them into one plugin device (NCCL_FABRIC_RAILS=efa-lo-rdm,efa-lo-rdm-1; a value
// already set, even empty, is kept, so that a test can look at the NICs ungrouped).
// Traffic per NIC goes to efaRulesStats().
void useTestProvider(const std::string& provider);

// softefa (NNF_TEST_PROVIDER=softefa[+PROTOCOL][+2rails]): libfabric's real efa provider on the
// software EFA device (tests/soft_efa), one NIC per rail (NNF_SOFT_EFA_NICS), two grouped into
// one device by NCCL_FABRIC_RAILS as on efa; FI_PROVIDER=efa, FI_EFA_ENABLE_SHM_TRANSFER=0 (local
// peers talk through the device), FI_PROVIDER_PATH unset (the stand-in stays out); the fake CUDA
// driver hands out GPU memory the CPU cannot touch (NNF_FAKE_CUDA_NO_CPU_ACCESS=1) and is also
// libfabric's libcuda.so.1/libcudart.so; a namespace of the test process's own
// (NNF_SOFT_EFA_NS), removed at its end; traffic per device to efaRulesStats() (the stats
// functions below read it on softefa as on efa). The process starts itself again when
// LD_LIBRARY_PATH lacks the device's folder. testProvider() says "efa" there.
bool onSoftEfa();
void useSoftEfa();
// The device's libraries (NNF_SOFT_EFA_DIR, else the build tree's tests/soft_efa/lib) and the
// fake driver's libcuda.so.1/libcudart.so folder (beside fakeCudaLibrary()).
std::string softEfaLibDir();
std::string fakeCudaLibDir();
// The software device's name of NIC `nic` ("rdmap79s0", as udev names an EFA at 0000:4f:00.0).
std::string softEfaDeviceName(int nic);
bool writeSoftEfaStats();

// Rails per device the test runs with: NNF_TEST_RAILS (1 when unset).
int testRails();
// The EFA-rules provider's domain name of NIC `nic` over the base the tests use
// (NNF_EFA_RULES_BASE: tcp on FI_TCP_IFACE, default lo; or shm): efa-lo-rdm, efa-lo-rdm-1, ...;
// on softefa the real provider's: rdmap79s0-rdm, rdmap80s0-rdm, ...
std::string efaRulesDomainName(int nic);
// This test process's per-domain traffic file (NNF_EFA_RULES_STATS, tests/efa_rules/stats.cc).
std::string efaRulesStats();
// Has the EFA-rules provider loaded in this process write its totals now; false when it is not
// loaded or NNF_EFA_RULES_STATS is unset.
bool writeEfaRulesStats();
struct EfaRulesTraffic {
  uint64_t written = 0;  // bytes written by RMA
  uint64_t sent = 0;     // bytes sent (msg and tagged)
  uint64_t read = 0;     // bytes read by RMA
};
// Per domain name: the latest totals of process `pid` (0: every process, summed).
std::map<std::string, EfaRulesTraffic> readEfaRulesStats(const std::string& path, long pid = 0);
// Bytes this process has written by RMA on the EFA-rules provider so far, every NIC summed;
// false when that provider is not loaded here.
bool efaRulesWrittenHere(uint64_t* written);

// The EFA-rules provider's evidence that its rules were at work (tests/efa_rules/efa_rules.h,
// Evidence; the "rules pid=<pid> <name>=<count> ..." lines of the stats file): per name, the
// latest totals of each process, summed over the processes.
std::map<std::string, uint64_t> readEfaRulesEvidence(const std::string& path);
// What that evidence says the stand-in failed to do: each rule that applied to posts of the run
// without ever checking one, and no completion reordered although many could have been (a
// stand-in weakened by a setting or an edit). Empty when all is well.
std::vector<std::string> efaRulesEvidenceGaps(const std::map<std::string, uint64_t>& evidence);
// The gaps of the evidence in `statsPath` (this process's share written first), as an assertion:
// every test process on the EFA-rules provider ends with it (useTestProvider), and so do the
// tests that set the provider up themselves (tests/efa).
::testing::AssertionResult efaRulesEvidenceHolds(const std::string& statsPath);
// Has every child forked from now on (support/processes.h) write the stand-in's totals as it
// leaves: children end with _exit, which skips the stand-in's own writing at exit.
void writeEfaRulesStatsAtChildExit();

// The EFA-rules provider's directory (FI_PROVIDER_PATH: NNF_EFA_RULES_DIR, else the build
// tree's) and this test process's report file.
std::string efaRulesDir();
std::string efaRulesReport();
// The report's lines ("<rule> <detail>"), empty when no rule was broken.
std::vector<std::string> readEfaRulesReport(const std::string& path);

}  // namespace nnf::test
