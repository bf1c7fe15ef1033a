// How the config fuzzer's input stands for an environment, shared by the fuzzer, the seed
// generator and the seed test so that the three cannot disagree: one NUL-terminated segment per
// row of the parameter table, in table order; a segment that is the single byte 0x01, or one past
// the end of the input, leaves its variable unset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "config/config.h"

namespace nnf::test {

class EnvInput {
 public:
  static constexpr char kUnset = '\x01';

  // Reads `size` bytes the way the fuzzer does; extra segments beyond the table are ignored.
  EnvInput(const uint8_t* data, size_t size) {
    size_t start = 0;
    while (start <= size && values_.size() < config::table().size()) {
      const void* nul = memchr(data + start, 0, size - start);
      size_t end =
          nul != nullptr ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - data) : size;
      values_.emplace_back(reinterpret_cast<const char*>(data + start), end - start);
      start = end + 1;
    }
  }

  // The input bytes for one value per table row (nullptr: unset).
  static std::string encode(const std::vector<const char*>& values) {
    std::string bytes;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) bytes.push_back('\0');
      bytes += values[i] != nullptr ? std::string(values[i]) : std::string(1, kUnset);
    }
    return bytes;
  }

  // A lookup for Config::load; valid while this object lives.
  config::Lookup lookup() const {
    return [this](const char* name) -> const char* {
      const auto& table = config::table();
      for (size_t i = 0; i < values_.size(); ++i) {
        if (strcmp(table[i].envName, name) != 0) continue;
        return values_[i] == std::string(1, kUnset) ? nullptr : values_[i].c_str();
      }
      return nullptr;
    };
  }

 private:
  std::vector<std::string> values_;
};

}  // namespace nnf::test
