// v10+ comm configs and v11+ per-communicator contexts. The plugin itself is process-wide (one
// set of devices, one provider), so a context only records what NCCL told us about its
// communicator; listen and connect check that they are given a live one.
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "abi/convert.h"
#include "abi/entries.h"
#include "log/log.h"

namespace nnf::abi::entry {
namespace {

struct NetContext {
  uint64_t commId = 0;
  int trafficClass = kTrafficClassUndef;
  NetAttr attr{};  // the latest setNetAttr hints (not used for tuning yet)
};

// Contexts NCCL holds. Checked before use, so a stale or foreign pointer is reported rather than
// dereferenced. Only listen/connect/finalize look here: never the data path.
std::mutex contextsMutex;
std::unordered_set<NetContext*> contexts;

// Caller holds contextsMutex.
NetContext* findContext(void* ctx, const char* entry) {
  auto* context = static_cast<NetContext*>(ctx);
  if (contexts.count(context) == 0) {
    NNF_WARN("%s: %p is not a network context from init (finalized already?)", entry, ctx);
    return nullptr;
  }
  return context;
}

}  // namespace

void noteTrafficClass(const CommConfig* config, const char* entry) noexcept {
  if (config == nullptr || config->trafficClass == kTrafficClassUndef) return;
  // Once per process: NCCL repeats the same class for every connection of a communicator.
  static std::atomic<bool> noted{false};
  if (noted.exchange(true)) return;
  guarded(entry, [&] {
    NNF_INFO(kLogSubsysInit | kLogSubsysNet,
             "%s: traffic class %d requested; not applied (no libfabric traffic class is set yet)",
             entry, config->trafficClass);
    return kSuccess;
  });
}

Result initContext(void** ctx, uint64_t commId, CommConfig* config, Logger logger,
                   ProfilerCallback profiler) noexcept {
  return guarded("init", [&] {
    if (ctx == nullptr) {
      NNF_WARN("init: NULL context pointer");
      return kInternalError;
    }
    Result result = core::Plugin::instance().init(logger);
    if (result != kSuccess) return result;
    noteTrafficClass(config, "init");
    auto context = std::make_unique<NetContext>();
    context->commId = commId;
    if (config != nullptr) context->trafficClass = config->trafficClass;
    std::lock_guard<std::mutex> lock(contextsMutex);
    contexts.insert(context.get());
    *ctx = context.release();
    return kSuccess;
  });
}

Result finalize(void* ctx) noexcept {
  return guarded("finalize", [&] {
    std::lock_guard<std::mutex> lock(contextsMutex);
    auto* context = static_cast<NetContext*>(ctx);
    if (findContext(ctx, "finalize") == nullptr) return kInternalError;
    contexts.erase(context);
    delete context;
    return kSuccess;
  });
}

Result setNetAttr(void* ctx, NetAttr* attr) noexcept {
  return guarded("setNetAttr", [&] {
    std::lock_guard<std::mutex> lock(contextsMutex);
    NetContext* context = findContext(ctx, "setNetAttr");
    if (context == nullptr) return kInternalError;
    if (attr == nullptr) {
      NNF_WARN("setNetAttr: NULL attributes");
      return kInternalError;
    }
    // Hints for a plugin that tunes flows per operation; our protocol has nothing to tune yet.
    context->attr = *attr;
    return kSuccess;
  });
}

Result checkContext(void* ctx, const char* entry) noexcept {
  return guarded(entry, [&] {
    std::lock_guard<std::mutex> lock(contextsMutex);
    return findContext(ctx, entry) != nullptr ? kSuccess : kInternalError;
  });
}

Result listenInContext(void* ctx, int dev, void* handle, void** listenComm) noexcept {
  Result result = checkContext(ctx, "listen");
  return result == kSuccess ? listen(dev, handle, listenComm) : result;
}

Result connectInContext(void* ctx, int dev, void* handle, void** sendComm,
                        NetDeviceHandle** devComm) noexcept {
  Result result = checkContext(ctx, "connect");
  return result == kSuccess ? connect(dev, handle, sendComm, devComm) : result;
}

}  // namespace nnf::abi::entry
