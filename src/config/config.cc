#include "config/config.h"

#include <strings.h>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>

namespace nnf::config {
namespace {

std::vector<ParamSpec> buildTable() {
  return {
#define NNF_PARAM(id, env, type, def, constraint, doc) \
  {Param::id, env, Type::type, def, constraint, doc},
#include "config/params.def"
#undef NNF_PARAM
  };
}

[[noreturn]] void fail(const std::string& name, const std::string& text, const std::string& want) {
  throw ConfigError(name + "=\"" + text + "\" is malformed: expected " + want);
}

void checkRange(const ParamSpec& spec, const std::string& text, int64_t value) {
  const char* dots = strstr(spec.constraint, "..");
  if (dots == nullptr) return;
  int64_t lo = strtoll(spec.constraint, nullptr, 10);
  int64_t hi = strtoll(dots + 2, nullptr, 10);
  if (value < lo || value > hi) {
    throw ConfigError(std::string(spec.envName) + "=" + text + " is out of range: expected " +
                      spec.constraint);
  }
}

void checkChoice(const ParamSpec& spec, const std::string& text) {
  std::string choices = spec.constraint;
  size_t start = 0;
  while (start <= choices.size()) {
    size_t bar = choices.find('|', start);
    if (bar == std::string::npos) bar = choices.size();
    if (choices.compare(start, bar - start, text) == 0 && text.size() == bar - start) return;
    start = bar + 1;
  }
  fail(spec.envName, text, "one of " + choices);
}

}  // namespace

const std::vector<ParamSpec>& table() {
  static const std::vector<ParamSpec> kTable = buildTable();
  return kTable;
}

const ParamSpec& spec(Param id) {
  return table()[static_cast<size_t>(id)];
}

const char* typeName(Type type) {
  switch (type) {
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kSize:
      return "size";
    case Type::kString:
      return "string";
    case Type::kEnum:
      return "enum";
  }
  return "?";
}

bool parseBool(const std::string& name, const std::string& text) {
  static const char* const kTrue[] = {"1", "true", "yes", "on"};
  static const char* const kFalse[] = {"0", "false", "no", "off"};
  for (const char* word : kTrue)
    if (strcasecmp(text.c_str(), word) == 0) return true;
  for (const char* word : kFalse)
    if (strcasecmp(text.c_str(), word) == 0) return false;
  fail(name, text, "1/0, true/false, yes/no or on/off");
}

int64_t parseInt(const std::string& name, const std::string& text, bool allowSizeSuffix) {
  const char* want = allowSizeSuffix ? "an integer with an optional K/M/G suffix" : "an integer";
  if (text.empty()) fail(name, text, want);
  errno = 0;
  char* end = nullptr;
  long long value = strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str()) fail(name, text, want);
  int64_t scale = 1;
  if (allowSizeSuffix && *end != '\0') {
    switch (*end) {
      case 'k':
      case 'K':
        scale = int64_t{1} << 10;
        break;
      case 'm':
      case 'M':
        scale = int64_t{1} << 20;
        break;
      case 'g':
      case 'G':
        scale = int64_t{1} << 30;
        break;
      default:
        fail(name, text, want);
    }
    ++end;
    if (*end == 'i' || *end == 'I') ++end;
    if (*end == 'b' || *end == 'B') ++end;
  }
  if (*end != '\0') fail(name, text, want);
  if (value > INT64_MAX / scale || value < INT64_MIN / scale) fail(name, text, want);
  return value * scale;
}

Config Config::load(const Lookup& lookup) {
  Config config;
  config.values_.resize(table().size());
  for (const ParamSpec& param : table()) {
    Value& value = config.values_[index(param.id)];
    const char* env = lookup ? lookup(param.envName) : getenv(param.envName);
    value.userSet = env != nullptr;
    value.text = env != nullptr ? env : param.defaultValue;
    switch (param.type) {
      case Type::kBool:
        value.number = parseBool(param.envName, value.text);
        break;
      case Type::kInt:
      case Type::kSize:
        value.number = parseInt(param.envName, value.text, param.type == Type::kSize);
        checkRange(param, value.text, value.number);
        break;
      case Type::kEnum:
        checkChoice(param, value.text);
        break;
      case Type::kString:
        break;
    }
  }
  return config;
}

std::vector<std::string> Config::describe() const {
  std::vector<std::string> lines;
  for (const ParamSpec& param : table()) {
    const Value& value = values_[index(param.id)];
    lines.push_back(std::string(param.envName) + "=" + value.text +
                    (value.userSet ? " (set)" : " (default)"));
  }
  return lines;
}

}  // namespace nnf::config
