// Deterministic data for transfers: every byte is a function of (message id, offset), so a
// receiver can verify what it got without the sender's buffer and a misplaced message shows up
// as a mismatch rather than as plausible data.
#pragma once

#include <cstddef>
#include <cstdint>

#include <gtest/gtest.h>

namespace nnf::test {

// The byte a message carries at an offset.
uint8_t patternByte(uint64_t message, size_t offset);

// Fills [data, data + size) with message `message`'s bytes from offset 0.
void fillPattern(void* data, size_t size, uint64_t message);

// Success when every byte matches; otherwise names the first wrong byte, what it held, what was
// expected, and how many bytes in all were wrong.
::testing::AssertionResult verifyPattern(const void* data, size_t size, uint64_t message);

// Fills with one constant byte, and checks that it is still there (to prove a receive wrote
// nothing beyond the size it reported).
void fillSentinel(void* data, size_t size, uint8_t value = 0xA5);
::testing::AssertionResult verifySentinel(const void* data, size_t size, uint8_t value = 0xA5);

}  // namespace nnf::test
