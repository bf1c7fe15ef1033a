// Fuzzes the configuration parsers with what a user can put in the environment: parseBool,
// parseInt (with and without size suffixes) and Config::load over a fuzzed environment. Any
// value must either load within its documented constraint or throw ConfigError; no other
// exception, no crash, no value outside its range.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "config/config.h"
#include "env_input.h"
#include "fuzz_common.h"

namespace nnf::test {
namespace {

using config::Config;
using config::ConfigError;
using config::Type;

// Environment values are C strings: whatever follows a NUL can never reach the parser.
std::string asEnvValue(const uint8_t* data, size_t size) {
  const void* nul = memchr(data, 0, size);
  size_t length =
      nul != nullptr ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - data) : size;
  return std::string(reinterpret_cast<const char*>(data), length);
}

void fuzzBool(const std::string& text) {
  try {
    config::parseBool("NNF_FUZZ", text);
  } catch (const ConfigError& error) {
    // The message must name the variable, or the user cannot tell which one is wrong.
    NNF_FUZZ_CHECK(strstr(error.what(), "NNF_FUZZ") != nullptr);
  }
}

void fuzzInt(const std::string& text, bool suffix) {
  int64_t value;
  try {
    value = config::parseInt("NNF_FUZZ", text, suffix);
  } catch (const ConfigError& error) {
    NNF_FUZZ_CHECK(strstr(error.what(), "NNF_FUZZ") != nullptr);
    return;
  }
  if (!suffix) {
    // Without suffixes the parser may accept only what strtoll reads completely.
    errno = 0;
    char* end = nullptr;
    long long plain = strtoll(text.c_str(), &end, 10);
    NNF_FUZZ_CHECK(errno == 0 && *end == '\0' && plain == value);
  }
}

// Config::load over the environment the input stands for (env_input.h).
void fuzzLoad(const uint8_t* data, size_t size) {
  EnvInput env(data, size);
  config::Lookup lookup = env.lookup();
  try {
    Config config = Config::load(lookup);
    for (const config::ParamSpec& spec : config::table()) {
      // A set variable is taken as given; an unset one takes its default.
      const char* given = lookup(spec.envName);
      NNF_FUZZ_CHECK(config.userSet(spec.id) == (given != nullptr));
      NNF_FUZZ_CHECK(config.string(spec.id) == (given != nullptr ? given : spec.defaultValue));
      if (spec.type == Type::kBool) {
        int64_t number = config.integer(spec.id);
        NNF_FUZZ_CHECK(number == 0 || number == 1);
      }
      const char* dots = strstr(spec.constraint, "..");
      if ((spec.type == Type::kInt || spec.type == Type::kSize) && dots != nullptr) {
        int64_t lo = strtoll(spec.constraint, nullptr, 10);
        int64_t hi = strtoll(dots + 2, nullptr, 10);
        int64_t number = config.integer(spec.id);
        NNF_FUZZ_CHECK(number >= lo && number <= hi);
      }
      if (spec.type == Type::kEnum) {
        // The loaded text must be one of the '|'-separated choices.
        std::string choices = std::string("|") + spec.constraint + "|";
        NNF_FUZZ_CHECK(choices.find("|" + config.string(spec.id) + "|") != std::string::npos);
      }
    }
    NNF_FUZZ_CHECK(config.describe().size() == config::table().size());
  } catch (const ConfigError&) {
    // Malformed values are expected to be refused.
  }
}

}  // namespace
}  // namespace nnf::test

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t* body = data + 1;
  size_t bodySize = size - 1;
  switch (data[0] % 4) {
    case 0:
      nnf::test::fuzzBool(nnf::test::asEnvValue(body, bodySize));
      break;
    case 1:
      nnf::test::fuzzInt(nnf::test::asEnvValue(body, bodySize), false);
      break;
    case 2:
      nnf::test::fuzzInt(nnf::test::asEnvValue(body, bodySize), true);
      break;
    default:
      nnf::test::fuzzLoad(body, bodySize);
      break;
  }
  // Anything other than ConfigError escaping here is a bug: libFuzzer reports it as a crash.
  return 0;
}
