#include "rma_plugin_engine.h"

#include <vector>

#include "plugin_engine.h"
#include "rma_loader.h"

namespace nnf::perf {
namespace {

constexpr uint64_t kCommId = 0x7065726672ULL;  // any value: one group per run

}  // namespace

RmaPluginEngine::~RmaPluginEngine() {
  close();
}

bool RmaPluginEngine::check(const char* call, abi::Result rc) {
  if (rc == abi::kSuccess) return true;
  error_ = pluginCallError(std::string("RMA ") + call, rc);
  return false;
}

std::string RmaPluginEngine::description() const {
  if (rma_ == nullptr) return "not loaded";
  return std::string(rma_->name) + " ncclRmaPlugin_v" + std::to_string(version_) + ", device " +
         std::to_string(dev_) + " (" + deviceName_ + ") (" + path_ + ")";
}

bool RmaPluginEngine::load() {
  lib_ = loadPluginLibrary(path_, &error_);
  if (lib_ == nullptr) return false;
  // NCCL initialises its net plugin before the RMA plugin of the same library.
  if (!check("net init", lib_->net().init(pluginLogger()))) return false;
  std::string why;
  rma_ = tools::findRma(lib_->handle(), 0, tools::RmaLookup::kNccl231, &version_, &why);
  if (rma_ == nullptr) {
    error_ = path_ + ": " + why;
    return false;
  }
  if (!check("init", rma_->init(&instance_, kCommId, pluginLogger()))) return false;
  int ndev = 0;
  if (!check("devices", rma_->devices(&ndev))) return false;
  if (dev_ >= ndev) {
    error_ =
        "RMA device " + std::to_string(dev_) + " requested, plugin has " + std::to_string(ndev);
    return false;
  }
  abi::PropertiesV12 props{};
  if (!check("getProperties", rma_->getProperties(dev_, &props))) return false;
  if ((props.ptrSupport & abi::kPtrHost) == 0) {
    error_ = "plugin RMA device does not support host memory";
    return false;
  }
  deviceName_ = props.name != nullptr ? props.name : "?";
  return true;
}

bool RmaPluginEngine::connect(Bootstrap& boot) {
  rank_ = boot.rank();
  char handle[abi::kHandleMaxSize] = {};
  void* listen = nullptr;
  if (!check("listen", rma_->listen(instance_, dev_, handle, &listen))) return false;
  std::vector<std::string> mine(boot.size(), std::string(handle, sizeof(handle))), theirs;
  if (!boot.exchange(mine, &theirs)) {
    error_ = boot.error();
    return false;
  }
  theirs[boot.rank()] = mine[boot.rank()];
  std::vector<void*> handles(boot.size());
  for (int r = 0; r < boot.size(); ++r) handles[r] = &theirs[r][0];
  if (!check("connect",
             rma_->connect(instance_, handles.data(), boot.size(), boot.rank(), listen, &coll_)))
    return false;
  if (!check("closeListen", rma_->closeListen(listen))) return false;
  abi::RmaConfigV15 config{1, abi::kTrafficClassUndef, 1};
  return check("createContext", rma_->createContext(coll_, &config, &ctx_));
}

bool RmaPluginEngine::regWindow(Bootstrap&, char* base, size_t bytes) {
  base_ = base;
  return check("regMrSym", rma_->regMrSym(coll_, base, bytes, abi::kPtrHost, 0, &window_));
}

bool RmaPluginEngine::deregWindow() {
  if (window_ == nullptr) return true;
  void* window = window_;
  window_ = nullptr;
  return check("deregMrSym", rma_->deregMrSym(coll_, window));
}

bool RmaPluginEngine::put(int peer, size_t srcOff, size_t dstOff, size_t bytes, void** request) {
  return check("iput", rma_->iput(ctx_, 0, srcOff, window_, bytes, dstOff, window_,
                                  static_cast<uint32_t>(peer), 0, request));
}

bool RmaPluginEngine::putSignal(int peer, size_t srcOff, size_t dstOff, size_t bytes,
                                void** request) {
  // The signal word of this rank at the target; INC, as NCCL's put-with-signal.
  uint64_t signalOff = signalOffset(rank_);
  return check("iputSignal", rma_->iputSignal(ctx_, 0, srcOff, window_, bytes, dstOff, window_,
                                              static_cast<uint32_t>(peer), signalOff, window_, 1,
                                              abi::kSignalOpInc, false, 0, request));
}

bool RmaPluginEngine::get(int peer, size_t remoteOff, size_t localOff, size_t bytes,
                          void** request) {
  return check("iget", rma_->iget(ctx_, 0, remoteOff, window_, bytes, localOff, window_,
                                  static_cast<uint32_t>(peer), 0, request));
}

bool RmaPluginEngine::test(void* request, int* done) {
  if (!check("test", rma_->test(coll_, request, done))) return false;
  return *done || rma_->rmaProgress == nullptr || check("rmaProgress", rma_->rmaProgress(ctx_));
}

bool RmaPluginEngine::signals(int peer, uint64_t* count) {
  if (rma_->rmaProgress != nullptr && !check("rmaProgress", rma_->rmaProgress(ctx_))) return false;
  const auto* word = reinterpret_cast<const uint64_t*>(base_ + signalOffset(peer));
  *count = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  return true;
}

bool RmaPluginEngine::close() {
  bool ok = deregWindow();
  if (ctx_ != nullptr) ok = check("destroyContext", rma_->destroyContext(ctx_)) && ok;
  if (coll_ != nullptr) ok = check("closeColl", rma_->closeColl(coll_)) && ok;
  if (instance_ != nullptr) ok = check("finalize", rma_->finalize(instance_)) && ok;
  ctx_ = coll_ = instance_ = nullptr;
  return ok;
}

}  // namespace nnf::perf
