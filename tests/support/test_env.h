// Where tests find their inputs.
#pragma once

#include <string>

namespace nnf::test {

// ../shared/fixtures beside the checkout (or NNF_SHARED_FIXTURES), "" when absent: tests that
// need it skip with a message.
std::string sharedFixturesDir();

// The provider the test runs on (NNF_TEST_PROVIDER, else FI_PROVIDER), "" when unset.
std::string testProvider();

// The fake CUDA driver for GPU-memory tests: NNF_FAKE_CUDA_LIBRARY, else the library built beside
// the test binaries (build/tests/fake_cuda/libnnf_fake_cuda.so).
std::string fakeCudaLibrary();

// The project's source tree (for its own fixtures under tests/fixtures).
std::string sourceDir();

}  // namespace nnf::test
