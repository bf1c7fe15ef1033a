// main() of the reliability tests: `--nnf-provider=NAME` sets FI_PROVIDER=NAME, FI_TCP_IFACE=lo
// (traffic stays on loopback) and NNF_TEST_PROVIDER=NAME before any test runs. ctest passes the
// flag per provider: gtest_discover_tests (CMake 3.25) flattens list-valued PROPERTIES, so an
// ENVIRONMENT with several variables would keep only the first.
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "support/test_env.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* prefix = "--nnf-provider=";
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], prefix, strlen(prefix)) != 0) continue;
    const char* provider = argv[i] + strlen(prefix);
    setenv("NNF_TEST_PROVIDER", provider, 1);
    nnf::test::useTestProvider(provider);
    // Network namespace tests override the interface in their children.
    setenv("FI_TCP_IFACE", "lo", 0);
  }
  return RUN_ALL_TESTS();
}
