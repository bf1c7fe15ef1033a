// The plugin's configuration: one table of parameters (params.def), read once from the
// environment. A malformed value is an error, never a silent default.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nnf::config {

enum class Type { kBool, kInt, kSize, kString, kEnum };

enum class Param : int {
#define NNF_PARAM(id, env, type, def, constraint, doc) id,
#include "config/params.def"
#undef NNF_PARAM
  kCount
};

struct ParamSpec {
  Param id;
  const char* envName;
  Type type;
  const char* defaultValue;
  const char* constraint;
  const char* doc;
};

// Every parameter, in table order.
const std::vector<ParamSpec>& table();
const ParamSpec& spec(Param id);
const char* typeName(Type type);

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Lookup = std::function<const char*(const char*)>;

class Config {
 public:
  // Reads every parameter through `lookup` (getenv by default). Throws ConfigError naming the
  // variable, the bad value and what is accepted.
  static Config load(const Lookup& lookup = nullptr);

  int64_t integer(Param id) const { return values_[index(id)].number; }
  bool flag(Param id) const { return values_[index(id)].number != 0; }
  const std::string& string(Param id) const { return values_[index(id)].text; }
  bool userSet(Param id) const { return values_[index(id)].userSet; }

  // One "NAME=value (default|set)" line per parameter.
  std::vector<std::string> describe() const;

 private:
  struct Value {
    std::string text;
    int64_t number = 0;
    bool userSet = false;
  };
  static size_t index(Param id) { return static_cast<size_t>(id); }
  std::vector<Value> values_;
};

// Parsers, exposed for unit tests. Each throws ConfigError on malformed input.
bool parseBool(const std::string& name, const std::string& text);
int64_t parseInt(const std::string& name, const std::string& text, bool allowSizeSuffix);

}  // namespace nnf::config
