// A small JSON reader for what the tools print (objects, arrays, strings, numbers, true, false,
// null), so that tests compare fields rather than whole lines.
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace nnf::test {

class Json {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  // Throws std::runtime_error naming the offset of the first thing it cannot read.
  static Json parse(const std::string& text);

  Kind kind() const { return kind_; }
  bool isNull() const { return kind_ == Kind::kNull; }
  // Each accessor throws std::runtime_error when the value is of another kind (or, for at(),
  // lacks the member).
  bool boolean() const;
  double number() const;
  const std::string& string() const;
  const std::vector<Json>& array() const;
  const Json& at(const std::string& member) const;
  bool has(const std::string& member) const;
  // An array of strings, as a vector.
  std::vector<std::string> strings() const;

 private:
  friend class JsonReader;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> array_;
  std::map<std::string, Json> object_;
};

}  // namespace nnf::test
