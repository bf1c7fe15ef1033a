#include "log/log.h"

#include "log/assert.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nnf::log {
namespace {

// The sink is process-wide by nature (NCCL hands us one logger); it is set once at init and
// only read afterwards, hence atomics rather than a lock.
std::atomic<abi::Logger> g_logger{nullptr};
std::atomic<int> g_stderrLevel{-1};

int stderrLevelFromEnv() {
  const char* level = std::getenv("NCCL_DEBUG");
  if (level == nullptr) return abi::kLogWarn;
  if (strcasecmp(level, "TRACE") == 0) return abi::kLogTrace;
  if (strcasecmp(level, "INFO") == 0) return abi::kLogInfo;
  if (strcasecmp(level, "VERSION") == 0) return abi::kLogVersion;
  if (strcasecmp(level, "NONE") == 0) return abi::kLogNone;
  return abi::kLogWarn;
}

int stderrLevel() {
  int level = g_stderrLevel.load(std::memory_order_relaxed);
  if (level < 0) {
    level = stderrLevelFromEnv();
    g_stderrLevel.store(level, std::memory_order_relaxed);
  }
  return level;
}

}  // namespace

void setLogger(abi::Logger logger) {
  g_logger.store(logger, std::memory_order_release);
  g_stderrLevel.store(stderrLevelFromEnv(), std::memory_order_relaxed);
}

bool enabled(abi::LogLevel level) {
  // NCCL filters by its own NCCL_DEBUG; we only know it is at least WARN, so defer to it.
  if (g_logger.load(std::memory_order_acquire) != nullptr) return true;
  return level <= stderrLevel();
}

void write(abi::LogLevel level, unsigned long subsys, const char* file, int line, const char* fmt,
           ...) {
  char text[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);

  abi::Logger logger = g_logger.load(std::memory_order_acquire);
  if (logger != nullptr) {
    logger(level, subsys, file, line, "%s", text);
    return;
  }
  if (level > stderrLevel()) return;
  const char* tag = level == abi::kLogWarn ? "WARN" : (level == abi::kLogTrace ? "TRACE" : "INFO");
  fprintf(stderr, "%s %s\n", tag, text);
}

void assertFailed(const char* file, int line, const char* condition, const char* fmt, ...) {
  char text[768];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  // NCCL's log when it gave us one, and stderr in any case (whatever NCCL_DEBUG says): the
  // process ends here.
  if (g_logger.load(std::memory_order_acquire) != nullptr) {
    write(abi::kLogWarn, abi::kLogSubsysNet, file, line,
          "NET/Fabric : assertion failed at %s:%d: %s (%s)", file, line, text, condition);
  }
  fprintf(stderr, "WARN NET/Fabric : assertion failed at %s:%d: %s (%s)\n", file, line, text,
          condition);
  abort();
}

}  // namespace nnf::log
