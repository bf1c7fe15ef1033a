#include "support/patterns.h"

#include <cstring>

namespace nnf::test {
namespace {

// splitmix64: cheap enough to regenerate 256 MiB twice per test and never repeats a period
// that a shifted or duplicated block could alias with.
uint64_t mix(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

uint64_t patternWord(uint64_t message, size_t word) {
  return mix((message << 40) ^ (message >> 24) ^ static_cast<uint64_t>(word));
}

}  // namespace

uint8_t patternByte(uint64_t message, size_t offset) {
  uint64_t word = patternWord(message, offset / 8);
  return static_cast<uint8_t>(word >> (8 * (offset % 8)));
}

void fillPattern(void* data, size_t size, uint64_t message) {
  auto* bytes = static_cast<uint8_t*>(data);
  size_t words = size / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t word = patternWord(message, i);
    memcpy(bytes + 8 * i, &word, 8);  // memcpy: the buffer need not be 8-byte aligned
  }
  for (size_t offset = words * 8; offset < size; ++offset)
    bytes[offset] = patternByte(message, offset);
}

::testing::AssertionResult verifyPattern(const void* data, size_t size, uint64_t message) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t words = size / 8;
  size_t first = size;
  // Fast path word by word; only a mismatching word is examined byte by byte.
  for (size_t i = 0; i < words && first == size; ++i) {
    uint64_t expected = patternWord(message, i);
    if (memcmp(bytes + 8 * i, &expected, 8) == 0) continue;
    for (size_t offset = 8 * i; offset < 8 * i + 8; ++offset)
      if (bytes[offset] != patternByte(message, offset)) {
        first = offset;
        break;
      }
  }
  if (first == size)
    for (size_t offset = words * 8; offset < size; ++offset)
      if (bytes[offset] != patternByte(message, offset)) {
        first = offset;
        break;
      }
  if (first == size) return ::testing::AssertionSuccess();
  size_t wrong = 0;
  for (size_t offset = first; offset < size; ++offset)
    wrong += bytes[offset] != patternByte(message, offset);
  char text[256];
  snprintf(text, sizeof(text),
           "message %llu (%zu bytes): first wrong byte at offset %zu holds 0x%02x, expected "
           "0x%02x; %zu bytes wrong in all",
           static_cast<unsigned long long>(message), size, first, bytes[first],
           patternByte(message, first), wrong);
  return ::testing::AssertionFailure() << text;
}

void fillSentinel(void* data, size_t size, uint8_t value) {
  memset(data, value, size);
}

::testing::AssertionResult verifySentinel(const void* data, size_t size, uint8_t value) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t offset = 0; offset < size; ++offset)
    if (bytes[offset] != value) {
      char text[160];
      snprintf(text, sizeof(text),
               "byte %zu of %zu past the message was overwritten: 0x%02x instead of 0x%02x", offset,
               size, bytes[offset], value);
      return ::testing::AssertionFailure() << text;
    }
  return ::testing::AssertionSuccess();
}

}  // namespace nnf::test
