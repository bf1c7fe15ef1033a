#include "support/json.h"

#include <cstdlib>

namespace nnf::test {

// Recursive descent over the text; one object per parse.
class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : text_(text) {}

  Json document() {
    Json value = read();
    skipBlanks();
    if (at_ != text_.size()) fail("text after the value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON at offset " + std::to_string(at_) + ": " + what);
  }
  void skipBlanks() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t' || text_[at_] == '\r')) {
      ++at_;
    }
  }
  bool take(char c) {
    skipBlanks();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  bool takeWord(const char* word) {
    size_t length = std::char_traits<char>::length(word);
    if (text_.compare(at_, length, word) != 0) return false;
    at_ += length;
    return true;
  }

  std::string readString() {
    expect('"');
    std::string out;
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) fail("unfinished escape");
      char e = text_[at_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          if (at_ + 4 > text_.size()) fail("short \\u escape");
          long code = strtol(text_.substr(at_, 4).c_str(), nullptr, 16);
          if (code > 0x7f) fail("\\u escape beyond ASCII");
          out += static_cast<char>(code);
          at_ += 4;
          break;
        }
        default:
          out += e;
      }
    }
    if (at_ >= text_.size()) fail("unfinished string");
    ++at_;
    return out;
  }

  Json read() {
    skipBlanks();
    if (at_ >= text_.size()) fail("no value");
    Json value;
    char c = text_[at_];
    if (c == '{') {
      ++at_;
      value.kind_ = Json::Kind::kObject;
      if (take('}')) return value;
      do {
        skipBlanks();
        std::string key = readString();
        expect(':');
        value.object_[key] = read();
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++at_;
      value.kind_ = Json::Kind::kArray;
      if (take(']')) return value;
      do {
        value.array_.push_back(read());
      } while (take(','));
      expect(']');
    } else if (c == '"') {
      value.kind_ = Json::Kind::kString;
      value.string_ = readString();
    } else if (takeWord("true")) {
      value.kind_ = Json::Kind::kBool;
      value.bool_ = true;
    } else if (takeWord("false")) {
      value.kind_ = Json::Kind::kBool;
    } else if (takeWord("null")) {
      value.kind_ = Json::Kind::kNull;
    } else {
      const char* start = text_.c_str() + at_;
      char* end = nullptr;
      value.number_ = strtod(start, &end);
      if (end == start) fail("not a value");
      value.kind_ = Json::Kind::kNumber;
      at_ += static_cast<size_t>(end - start);
    }
    return value;
  }

  const std::string& text_;
  size_t at_ = 0;
};

Json Json::parse(const std::string& text) {
  return JsonReader(text).document();
}

namespace {
[[noreturn]] void wrongKind(const char* wanted) {
  throw std::runtime_error(std::string("JSON value is not ") + wanted);
}
}  // namespace

bool Json::boolean() const {
  if (kind_ != Kind::kBool) wrongKind("a boolean");
  return bool_;
}

double Json::number() const {
  if (kind_ != Kind::kNumber) wrongKind("a number");
  return number_;
}

const std::string& Json::string() const {
  if (kind_ != Kind::kString) wrongKind("a string");
  return string_;
}

const std::vector<Json>& Json::array() const {
  if (kind_ != Kind::kArray) wrongKind("an array");
  return array_;
}

const Json& Json::at(const std::string& member) const {
  if (kind_ != Kind::kObject) wrongKind("an object");
  auto it = object_.find(member);
  if (it == object_.end()) throw std::runtime_error("JSON object has no member " + member);
  return it->second;
}

bool Json::has(const std::string& member) const {
  return kind_ == Kind::kObject && object_.count(member) != 0;
}

std::vector<std::string> Json::strings() const {
  std::vector<std::string> out;
  for (const Json& item : array()) out.push_back(item.string());
  return out;
}

}  // namespace nnf::test
