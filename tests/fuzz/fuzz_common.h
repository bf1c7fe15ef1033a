// Shared pieces of the libFuzzer targets: a check that aborts (so libFuzzer records the input as
// a crash) when a decoder breaks one of its own promises, not only when it touches bad memory.
#pragma once

#include <cstdio>
#include <cstdlib>

// Aborting is the only way to make libFuzzer keep the input; a plain failure would be ignored.
#define NNF_FUZZ_CHECK(condition)                                                       \
  do {                                                                                  \
    if (!(condition)) {                                                                 \
      fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #condition); \
      abort();                                                                          \
    }                                                                                   \
  } while (0)
