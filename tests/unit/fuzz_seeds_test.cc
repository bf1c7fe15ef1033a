// The committed fuzz seeds (tests/fuzz/corpus) must be valid inputs: a seed that its decoder
// refuses, or a configuration seed that no longer loads, never reaches the checks the fuzzer
// makes on accepted input. Regenerate them with the nnf_fuzz_make_seeds target when this fails.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/config.h"
#include "core/wire.h"
#include "fuzz/env_input.h"
#include "fuzz/handle_input.h"

namespace nnf::test {
namespace {

using Bytes = std::vector<uint8_t>;
const std::string kCorpus = std::string(NNF_SOURCE_DIR) + "/tests/fuzz/corpus/";

// name -> bytes of every file in one target's corpus.
std::vector<std::pair<std::string, Bytes>> seeds(const std::string& target) {
  std::vector<std::pair<std::string, Bytes>> files;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus + target)) {
    std::ifstream file(entry.path(), std::ios::binary);
    files.emplace_back(entry.path().filename().string(),
                       Bytes(std::istreambuf_iterator<char>(file), {}));
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(FuzzSeeds, ListenHandlesDecodeForTheProviderTheirControlBytePicks) {
  auto files = seeds("listen_handle");
  ASSERT_GE(files.size(), 4u);
  for (const auto& [name, bytes] : files) {
    ASSERT_EQ(bytes.size(), 1 + sizeof(core::wire::ListenHandle)) << name;
    core::wire::ListenHandle out;
    std::string reason;
    EXPECT_TRUE(core::wire::decodeListenHandle(bytes.data() + 1, bytes.size() - 1,
                                               handle_input::provider(bytes[0]), &out, &reason))
        << name << ": " << reason;
  }
}

// The connect and accept fuzzers decode against listener / sender 7 first.
TEST(FuzzSeeds, ConnectMessagesDecode) {
  auto files = seeds("connect_message");
  ASSERT_GE(files.size(), 1u);
  for (const auto& [name, bytes] : files) {
    core::wire::ConnectMessage out;
    std::string reason;
    EXPECT_TRUE(core::wire::decodeConnectMessage(bytes.data(), bytes.size(), 7, &out, &reason))
        << name << ": " << reason;
  }
}

TEST(FuzzSeeds, AcceptMessagesDecode) {
  auto files = seeds("accept_message");
  ASSERT_GE(files.size(), 1u);
  for (const auto& [name, bytes] : files) {
    core::wire::AcceptMessage out;
    std::string reason;
    EXPECT_TRUE(core::wire::decodeAcceptMessage(bytes.data(), bytes.size(), 7, &out, &reason))
        << name << ": " << reason;
  }
}

// Control byte 3: a whole environment, one value per row of today's table; it must load.
// 0, 1, 2: one bool, int or size text that must parse.
TEST(FuzzSeeds, ConfigurationSeedsLoadAgainstTodaysTable) {
  auto files = seeds("config");
  int environments = 0;
  for (const auto& [name, bytes] : files) {
    ASSERT_FALSE(bytes.empty()) << name;
    const std::string text(bytes.begin() + 1, bytes.end());
    try {
      switch (bytes[0] % 4) {
        case 0:
          config::parseBool(name, text);
          break;
        case 1:
        case 2:
          config::parseInt(name, text, bytes[0] % 4 == 2);
          break;
        default: {
          ++environments;
          EnvInput env(bytes.data() + 1, bytes.size() - 1);
          config::Config::load(env.lookup());
          // Exactly one value per row: the seed was made from this very table.
          EXPECT_EQ(std::count(text.begin(), text.end(), '\0') + 1,
                    static_cast<long>(config::table().size()))
              << name << " has a value for each of a table of another size";
          break;
        }
      }
    } catch (const config::ConfigError& error) {
      ADD_FAILURE() << name << " does not load: " << error.what();
    }
  }
  EXPECT_GE(environments, 2);
}

}  // namespace
}  // namespace nnf::test
