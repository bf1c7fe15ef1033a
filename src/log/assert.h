// Run-time checks of the protocols' state machines (docs/architecture.md): NNF_ASSERT(condition,
// format, ...) logs "assertion failed" with the condition, the place and the message at WARN
// level, then aborts. Compiled in only with NNF_DEBUG_ASSERTS (CMake NNF_ASSERTS: on in Debug
// and sanitizer builds); elsewhere neither the condition nor the arguments are evaluated, so a
// release build's hot path pays nothing. Check only what the plugin itself guarantees: what a
// peer sends is validated on the data path and never asserted.
#pragma once

#include "log/log.h"

namespace nnf::log {

[[noreturn]] void assertFailed(const char* file, int line, const char* condition, const char* fmt,
                               ...) __attribute__((format(printf, 4, 5)));

}  // namespace nnf::log

#ifdef NNF_DEBUG_ASSERTS
#define NNF_ASSERTS_ON 1
#define NNF_ASSERT(condition, fmt, ...)                                             \
  do {                                                                              \
    if (__builtin_expect(!(condition), 0)) {                                        \
      ::nnf::log::assertFailed(__FILE__, __LINE__, #condition, fmt, ##__VA_ARGS__); \
    }                                                                               \
  } while (0)
#else
#define NNF_ASSERTS_ON 0
// Type-checked (the format too) but never evaluated.
#define NNF_ASSERT(condition, fmt, ...)                                               \
  do {                                                                                \
    if (false) {                                                                      \
      if (!(condition))                                                               \
        ::nnf::log::assertFailed(__FILE__, __LINE__, #condition, fmt, ##__VA_ARGS__); \
    }                                                                                 \
  } while (0)
#endif
