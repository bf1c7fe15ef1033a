// The configuration table and its parsers: defaults, user values, and malformed values that
// must fail loudly, naming the variable.
#include "config/config.h"

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>

#include <gtest/gtest.h>

namespace nnf::test {
namespace {

using config::Config;
using config::ConfigError;
using config::Param;
using config::Type;

// A fake environment for Config::load.
struct Env {
  std::map<std::string, std::string> vars;
  config::Lookup lookup() const {
    return [this](const char* name) -> const char* {
      auto found = vars.find(name);
      return found == vars.end() ? nullptr : found->second.c_str();
    };
  }
};

// The message of the ConfigError that loading `env` throws ("" when it throws none).
std::string loadError(const Env& env) {
  try {
    Config::load(env.lookup());
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

bool hasRange(const config::ParamSpec& spec, int64_t* lo, int64_t* hi) {
  std::string constraint = spec.constraint;
  size_t dots = constraint.find("..");
  if (dots == std::string::npos) return false;
  *lo = std::stoll(constraint.substr(0, dots));
  *hi = std::stoll(constraint.substr(dots + 2));
  return true;
}

TEST(ConfigTable, RowsAreWellFormedAndInIdOrder) {
  const auto& table = config::table();
  ASSERT_EQ(table.size(), static_cast<size_t>(Param::kCount));
  std::map<std::string, int> names;
  for (size_t i = 0; i < table.size(); ++i) {
    const config::ParamSpec& row = table[i];
    EXPECT_EQ(static_cast<size_t>(row.id), i) << row.envName;
    EXPECT_EQ(&config::spec(row.id), &row);
    EXPECT_EQ(std::string(row.envName).rfind("NCCL_FABRIC_", 0), 0u)
        << row.envName << " lacks the NCCL_FABRIC_ prefix";
    EXPECT_EQ(names[row.envName]++, 0) << row.envName << " appears twice";
    EXPECT_NE(row.defaultValue, nullptr);
    EXPECT_NE(row.constraint, nullptr);
    EXPECT_GT(std::string(row.doc).size(), 10u) << row.envName << " has no documentation";
    EXPECT_STRNE(config::typeName(row.type), "?");
  }
}

TEST(ConfigLoad, DefaultsWhenNothingIsSet) {
  Env env;
  Config config = Config::load(env.lookup());
  for (const config::ParamSpec& row : config::table()) {
    SCOPED_TRACE(row.envName);
    EXPECT_FALSE(config.userSet(row.id));
    EXPECT_EQ(config.string(row.id), row.defaultValue);
    if (row.type == Type::kInt || row.type == Type::kSize) {
      int64_t expected = config::parseInt(row.envName, row.defaultValue, row.type == Type::kSize);
      EXPECT_EQ(config.integer(row.id), expected);
      int64_t lo, hi;
      if (hasRange(row, &lo, &hi)) {
        EXPECT_GE(expected, lo) << "default outside its own range";
        EXPECT_LE(expected, hi) << "default outside its own range";
      }
    }
    if (row.type == Type::kBool) {
      EXPECT_EQ(config.flag(row.id), config::parseBool(row.envName, row.defaultValue));
    }
  }
}

// The shipped defaults, written out by hand: a change to any default in params.def must show up
// here as a deliberate edit, not pass because the test reads the same table it checks.
struct ShippedDefault {
  Param id;
  const char* envName;
  const char* text;  // the value as Config::string returns it
  int64_t number;    // Config::integer for bool/int/size rows (0 for strings and enums)
};
const ShippedDefault kShippedDefaults[] = {
    {Param::kProvider, "NCCL_FABRIC_PROVIDER", "", 0},
    {Param::kProtocol, "NCCL_FABRIC_PROTOCOL", "auto", 0},
    {Param::kMaxRecvs, "NCCL_FABRIC_MAX_RECVS", "8", 8},
    {Param::kInject, "NCCL_FABRIC_INJECT", "1", 1},
    {Param::kCqReadCount, "NCCL_FABRIC_CQ_READ_COUNT", "32", 32},
    {Param::kDefaultSpeedMbps, "NCCL_FABRIC_DEFAULT_SPEED_MBPS", "100000", 100000},
    {Param::kDeviceLatencyUs, "NCCL_FABRIC_LATENCY_US", "0", 0},
    {Param::kCloseTimeoutMs, "NCCL_FABRIC_CLOSE_TIMEOUT_MS", "10000", 10000},
    {Param::kMrCache, "NCCL_FABRIC_MR_CACHE", "1", 1},
    {Param::kMrCacheMaxEntries, "NCCL_FABRIC_MR_CACHE_MAX_ENTRIES", "0", 0},
    {Param::kMrCacheMaxBytes, "NCCL_FABRIC_MR_CACHE_MAX_BYTES", "0", 0},
    {Param::kCudaLibrary, "NCCL_FABRIC_CUDA_LIBRARY", "", 0},
    {Param::kGdr, "NCCL_FABRIC_GDR", "auto", 0},
    {Param::kGdrFlush, "NCCL_FABRIC_GDR_FLUSH", "read", 0},
    {Param::kDmaBuf, "NCCL_FABRIC_DMABUF", "auto", 0},
    {Param::kRails, "NCCL_FABRIC_RAILS", "", 0},
    {Param::kStripeMin, "NCCL_FABRIC_STRIPE_MIN", "262144", 262144},
    // Unset, the provider's rule decides (8 KiB on efa, shm and tcp); the row's default says so.
    {Param::kEagerMax, "NCCL_FABRIC_EAGER_MAX", "8192", 8192},
    // A failed rail is tried again every second: back within 5 s of its link (issue 27).
    {Param::kRailProbeMs, "NCCL_FABRIC_RAIL_PROBE_MS", "1000", 1000},
    // A write stuck 2 s while the peer's other rails complete: far beyond SRD's retransmits.
    {Param::kRailTimeoutMs, "NCCL_FABRIC_RAIL_TIMEOUT_MS", "2000", 2000},
    {Param::kPeerCheckMs, "NCCL_FABRIC_PEER_CHECK_MS", "1000", 1000},
    // Healthy ranks wait for hours (checkpoints, evaluation): no request timeout unless asked.
    {Param::kRequestTimeoutS, "NCCL_FABRIC_REQUEST_TIMEOUT_S", "0", 0},
    {Param::kSequenceStart, "NCCL_FABRIC_SEQUENCE_START", "0", 0},
    // A collective set-up waits for every rank; five minutes covers a slow rank's start.
    {Param::kRmaSetupTimeoutMs, "NCCL_FABRIC_RMA_SETUP_TIMEOUT_MS", "300000", 300000},
};

TEST(ConfigLoad, ShippedDefaultsAreTheOnesWrittenHere) {
  // Every row is listed: a new parameter needs its default pinned here too.
  ASSERT_EQ(std::size(kShippedDefaults), config::table().size());
  Env env;
  Config config = Config::load(env.lookup());
  for (size_t i = 0; i < std::size(kShippedDefaults); ++i) {
    const ShippedDefault& expected = kShippedDefaults[i];
    const config::ParamSpec& row = config::spec(expected.id);
    SCOPED_TRACE(expected.envName);
    EXPECT_EQ(static_cast<size_t>(expected.id), i) << "listed out of table order";
    EXPECT_STREQ(row.envName, expected.envName);
    EXPECT_STREQ(row.defaultValue, expected.text);
    EXPECT_EQ(config.string(expected.id), expected.text);
    if (row.type == Type::kBool || row.type == Type::kInt || row.type == Type::kSize) {
      EXPECT_EQ(config.integer(expected.id), expected.number);
    }
  }
}

TEST(ConfigLoad, UserValuesAreTakenAndMarkedSet) {
  Env env;
  env.vars["NCCL_FABRIC_MAX_RECVS"] = "4";
  env.vars["NCCL_FABRIC_PROVIDER"] = "tcp";
  env.vars["NCCL_FABRIC_PROTOCOL"] = "sendrecv";
  Config config = Config::load(env.lookup());
  EXPECT_EQ(config.integer(Param::kMaxRecvs), 4);
  EXPECT_TRUE(config.userSet(Param::kMaxRecvs));
  EXPECT_EQ(config.string(Param::kProvider), "tcp");
  EXPECT_TRUE(config.userSet(Param::kProvider));
  EXPECT_TRUE(config.userSet(Param::kProtocol));
  EXPECT_FALSE(config.userSet(Param::kCqReadCount));
}

TEST(ConfigLoad, EmptyStringIsAUserValue) {
  // An empty variable is set; for an integer it is malformed, not "use the default".
  Env env;
  env.vars["NCCL_FABRIC_CQ_READ_COUNT"] = "";
  std::string error = loadError(env);
  EXPECT_NE(error.find("NCCL_FABRIC_CQ_READ_COUNT"), std::string::npos) << error;
}

TEST(ConfigLoad, ReadsTheProcessEnvironmentByDefault) {
  setenv("NCCL_FABRIC_MAX_RECVS", "2", 1);
  Config config = Config::load();
  unsetenv("NCCL_FABRIC_MAX_RECVS");
  EXPECT_EQ(config.integer(Param::kMaxRecvs), 2);
  EXPECT_TRUE(config.userSet(Param::kMaxRecvs));
}

TEST(ConfigLoad, EveryRangeIsEnforcedAtBothEnds) {
  int checked = 0;
  for (const config::ParamSpec& row : config::table()) {
    int64_t lo, hi;
    if (!hasRange(row, &lo, &hi)) continue;
    SCOPED_TRACE(row.envName);
    ++checked;
    for (int64_t good : {lo, hi}) {
      Env env;
      env.vars[row.envName] = std::to_string(good);
      Config config = Config::load(env.lookup());
      EXPECT_EQ(config.integer(row.id), good);
    }
    for (int64_t bad : {lo - 1, hi + 1}) {
      Env env;
      env.vars[row.envName] = std::to_string(bad);
      std::string error = loadError(env);
      ASSERT_NE(error, "") << bad << " accepted";
      EXPECT_NE(error.find(row.envName), std::string::npos) << error;
      EXPECT_NE(error.find(std::to_string(bad)), std::string::npos) << error;
      EXPECT_NE(error.find(row.constraint), std::string::npos) << error;
    }
  }
  EXPECT_GE(checked, 1);
}

TEST(ConfigLoad, MalformedIntegersNameTheVariable) {
  for (const char* bad :
       {"", "abc", "12x", "1.5", "0x10", "4 ", "--1", "8K", "99999999999999999999"}) {
    Env env;
    env.vars["NCCL_FABRIC_MAX_RECVS"] = bad;
    std::string error = loadError(env);
    EXPECT_NE(error.find("NCCL_FABRIC_MAX_RECVS"), std::string::npos)
        << "value \"" << bad << "\" gave: " << error;
  }
}

TEST(ConfigLoad, EnumAcceptsOnlyItsChoices) {
  Env env;
  env.vars["NCCL_FABRIC_PROTOCOL"] = "bogus";
  std::string error = loadError(env);
  EXPECT_NE(error.find("NCCL_FABRIC_PROTOCOL"), std::string::npos) << error;
  EXPECT_NE(error.find("bogus"), std::string::npos) << error;
  EXPECT_NE(error.find("sendrecv"), std::string::npos) << "the error should list the choices";
  // A prefix of a choice is not the choice.
  env.vars["NCCL_FABRIC_PROTOCOL"] = "send";
  EXPECT_NE(loadError(env), "");
  env.vars["NCCL_FABRIC_PROTOCOL"] = "sendrecvx";
  EXPECT_NE(loadError(env), "");
  env.vars["NCCL_FABRIC_PROTOCOL"] = "";
  EXPECT_NE(loadError(env), "");
}

TEST(ConfigDescribe, OneLinePerParameterWithOrigin) {
  Env env;
  env.vars["NCCL_FABRIC_MAX_RECVS"] = "3";
  Config config = Config::load(env.lookup());
  std::vector<std::string> lines = config.describe();
  ASSERT_EQ(lines.size(), config::table().size());
  int found = 0;
  for (const std::string& line : lines) {
    if (line == "NCCL_FABRIC_MAX_RECVS=3 (set)") ++found;
    if (line == "NCCL_FABRIC_CQ_READ_COUNT=32 (default)") ++found;
  }
  EXPECT_EQ(found, 2);
}

TEST(ParseBool, AcceptsTheUsualSpellings) {
  for (const char* yes : {"1", "true", "TRUE", "True", "yes", "YES", "on", "On"})
    EXPECT_TRUE(config::parseBool("X", yes)) << yes;
  for (const char* no : {"0", "false", "FALSE", "no", "No", "off", "OFF"})
    EXPECT_FALSE(config::parseBool("X", no)) << no;
}

TEST(ParseBool, RejectsAnythingElseNamingTheVariable) {
  for (const char* bad : {"", "2", "-1", "y", "n", "truee", "enable", " 1", "1 "}) {
    try {
      config::parseBool("NCCL_FABRIC_SOMETHING", bad);
      ADD_FAILURE() << "\"" << bad << "\" accepted as a bool";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("NCCL_FABRIC_SOMETHING"), std::string::npos)
          << error.what();
    }
  }
}

TEST(ParseInt, PlainIntegers) {
  EXPECT_EQ(config::parseInt("X", "0", false), 0);
  EXPECT_EQ(config::parseInt("X", "42", false), 42);
  EXPECT_EQ(config::parseInt("X", "-7", false), -7);
  EXPECT_EQ(config::parseInt("X", "9223372036854775807", false), INT64_MAX);
  EXPECT_THROW(config::parseInt("X", "9223372036854775808", false), ConfigError);
  EXPECT_THROW(config::parseInt("X", "4K", false), ConfigError) << "suffix on a plain int";
  EXPECT_THROW(config::parseInt("X", "", false), ConfigError);
  EXPECT_THROW(config::parseInt("X", "K", true), ConfigError);
}

TEST(ParseInt, SizeSuffixes) {
  EXPECT_EQ(config::parseInt("X", "4096", true), 4096);
  EXPECT_EQ(config::parseInt("X", "4K", true), 4096);
  EXPECT_EQ(config::parseInt("X", "4k", true), 4096);
  EXPECT_EQ(config::parseInt("X", "4KiB", true), 4096);
  EXPECT_EQ(config::parseInt("X", "4KB", true), 4096);
  EXPECT_EQ(config::parseInt("X", "2M", true), int64_t{2} << 20);
  EXPECT_EQ(config::parseInt("X", "2mib", true), int64_t{2} << 20);
  EXPECT_EQ(config::parseInt("X", "3G", true), int64_t{3} << 30);
  EXPECT_EQ(config::parseInt("X", "3GB", true), int64_t{3} << 30);
  for (const char* bad : {"4T", "4KK", "4Kx", "4 K", "4iB", "4KBi", "9000000000G"}) {
    try {
      config::parseInt("NCCL_FABRIC_SIZE", bad, true);
      ADD_FAILURE() << "\"" << bad << "\" accepted as a size";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("NCCL_FABRIC_SIZE"), std::string::npos);
      EXPECT_NE(std::string(error.what()).find(bad), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace nnf::test
