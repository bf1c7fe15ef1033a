// Logging through NCCL's logger (prefix "NET/Fabric"), or to stderr when the plugin runs outside
// NCCL (tools, tests). Messages are formatted here because NCCL's logger is variadic and cannot
// take a va_list.
#pragma once

#include "nccl_net/types.h"

namespace nnf::log {

// Installs NCCL's logger; nullptr selects stderr, filtered by NCCL_DEBUG (WARN by default).
void setLogger(abi::Logger logger);

// True when messages of this level would be written (lets callers skip expensive formatting).
bool enabled(abi::LogLevel level);

void write(abi::LogLevel level, unsigned long subsys, const char* file, int line, const char* fmt,
           ...) __attribute__((format(printf, 5, 6)));

}  // namespace nnf::log

#define NNF_WARN(fmt, ...)                                                               \
  ::nnf::log::write(::nnf::abi::kLogWarn, ::nnf::abi::kLogSubsysNet, __FILE__, __LINE__, \
                    "NET/Fabric : " fmt, ##__VA_ARGS__)
#define NNF_INFO(subsys, fmt, ...)                                                           \
  ::nnf::log::write(::nnf::abi::kLogInfo, (subsys), __FILE__, __LINE__, "NET/Fabric : " fmt, \
                    ##__VA_ARGS__)
#define NNF_TRACE(fmt, ...)                                                                   \
  do {                                                                                        \
    if (::nnf::log::enabled(::nnf::abi::kLogTrace))                                           \
      ::nnf::log::write(::nnf::abi::kLogTrace, ::nnf::abi::kLogSubsysNet, __FILE__, __LINE__, \
                        "NET/Fabric : " fmt, ##__VA_ARGS__);                                  \
  } while (0)
