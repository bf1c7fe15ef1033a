// Where tests find their inputs.
#pragma once

#include <string>
#include <vector>

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
// `provider` may name a protocol too: "shm+sendrecv" sets NCCL_FABRIC_PROTOCOL=sendrecv.
void useTestProvider(const std::string& provider);

// The EFA-rules provider's directory (FI_PROVIDER_PATH: NNF_EFA_RULES_DIR, else the build
// tree's) and this test process's report file.
std::string efaRulesDir();
std::string efaRulesReport();
// The report's lines ("<rule> <detail>"), empty when no rule was broken.
std::vector<std::string> readEfaRulesReport(const std::string& path);

}  // namespace nnf::test
