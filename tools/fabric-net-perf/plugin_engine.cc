#include "plugin_engine.h"
#include "plugin_loader.h"

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace nnf::perf {
namespace {

// NCCL's tags vary per channel; any fixed value works for one stream per comm.
constexpr int kTag = 0x7a;
constexpr int kConnectTimeoutS = 60;

int gLogRank = 0;

abi::LogLevel logThreshold() {
  // The same switch NCCL users already know.
  const char* level = std::getenv("NCCL_DEBUG");
  if (level == nullptr) return abi::kLogWarn;
  if (strcasecmp(level, "INFO") == 0) return abi::kLogInfo;
  if (strcasecmp(level, "TRACE") == 0) return abi::kLogTrace;
  if (strcasecmp(level, "VERSION") == 0) return abi::kLogVersion;
  return abi::kLogWarn;
}

void logger(abi::LogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
            ...) {
  static const abi::LogLevel threshold = logThreshold();
  if (level > threshold || level == abi::kLogNone) return;
  const char* tag = level == abi::kLogWarn ? "WARN" : level == abi::kLogInfo ? "INFO" : "TRACE";
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "[rank %d] NCCL %s %s\n", gLogRank, tag, text);
}

}  // namespace

void setLogRank(int rank) {
  gLogRank = rank;
}

abi::Logger pluginLogger() {
  return logger;
}

PluginEngine::~PluginEngine() {
  close();
}

std::string pluginCallError(const std::string& call, abi::Result rc) {
  return "plugin " + call + " returned " + tools::resultName(rc) + " (" +
         std::to_string(static_cast<int>(rc)) + "); see the NCCL WARN lines above";
}

std::unique_ptr<tools::PluginLibrary> loadPluginLibrary(const std::string& path,
                                                        std::string* error) {
  try {
    return std::make_unique<tools::PluginLibrary>(path);
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}

bool PluginEngine::check(const char* call, abi::Result rc) {
  if (rc == abi::kSuccess) return true;
  error_ = pluginCallError(call, rc);
  return false;
}

bool PluginEngine::load() {
  lib_ = loadPluginLibrary(path_, &error_);
  if (lib_ == nullptr) return false;
  net_ = &lib_->net();
  if (!check("init", net_->init(logger))) return false;
  if (!check("devices", net_->devices(&ndev_))) return false;
  if (ndev_ <= 0) {
    error_ = "plugin reports no network device";
    return false;
  }
  if (dev_ >= ndev_) {
    error_ = "device " + std::to_string(dev_) + " requested, plugin has " + std::to_string(ndev_);
    return false;
  }
  if (!check("getProperties", net_->getProperties(dev_, &props_))) return false;
  if ((props_.ptrSupport & abi::kPtrHost) == 0) {
    error_ = "plugin device does not support host memory (ptrSupport lacks NCCL_PTR_HOST)";
    return false;
  }
  return true;
}

std::string PluginEngine::description() const {
  if (net_ == nullptr) return "not loaded";
  char text[512];
  std::snprintf(text, sizeof(text),
                "%s, dev %d of %d: %s, %d Mbps, maxComms %d, maxRecvs %d, regIsGlobal %d",
                net_->name, dev_, ndev_, props_.name ? props_.name : "(null)", props_.speed,
                props_.maxComms, props_.maxRecvs, props_.regIsGlobal);
  return text;
}

void* PluginEngine::comm(Dir dir, int peer, int index) const {
  return (dir == Dir::kSend ? sendComms_ : recvComms_)[peer * comms_ + index];
}

bool PluginEngine::connect(Bootstrap& boot, int comms) {
  comms_ = comms;
  int n = boot.size() * comms;
  if (props_.maxComms > 0 && 2 * (boot.size() - 1) * comms > props_.maxComms) {
    error_ = "needs " + std::to_string(2 * (boot.size() - 1) * comms) +
             " comms, plugin allows maxComms " + std::to_string(props_.maxComms);
    return false;
  }
  sendComms_.assign(n, nullptr);
  recvComms_.assign(n, nullptr);
  std::vector<void*> listenComms(n, nullptr);
  // The handles live until the connect loop ends: like NCCL, we pass the same buffer on every
  // connect call, and a plugin may keep state in it.
  std::vector<Handle> theirHandles(n);
  std::vector<std::string> mine(boot.size()), theirs;
  for (int peer = 0; peer < boot.size(); ++peer) {
    if (peer == boot.rank()) continue;
    for (int i = 0; i < comms; ++i) {
      Handle handle{};
      void*& lc = listenComms[peer * comms + i];
      if (!check("listen", net_->listen(dev_, handle.data(), &lc))) return false;
      if (lc == nullptr) {
        error_ = "plugin listen returned success with a NULL listenComm";
        return false;
      }
      mine[peer].append(handle.data(), handle.size());
    }
  }
  if (!boot.exchange(mine, &theirs)) {
    error_ = boot.error();
    return false;
  }
  for (int peer = 0; peer < boot.size(); ++peer) {
    if (peer == boot.rank()) continue;
    if (theirs[peer].size() != static_cast<size_t>(comms) * abi::kHandleMaxSize) {
      error_ = "bootstrap: wrong handle block size from rank " + std::to_string(peer);
      return false;
    }
    for (int i = 0; i < comms; ++i)
      std::memcpy(theirHandles[peer * comms + i].data(), &theirs[peer][i * abi::kHandleMaxSize],
                  abi::kHandleMaxSize);
  }
  // Both sides connect and accept at once, each call non-blocking, as NCCL's proxy does.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kConnectTimeoutS);
  for (;;) {
    bool pending = false;
    for (int peer = 0; peer < boot.size(); ++peer) {
      if (peer == boot.rank()) continue;
      for (int i = 0; i < comms; ++i) {
        int k = peer * comms + i;
        if (sendComms_[k] == nullptr) {
          abi::NetDeviceHandleV8* devHandle = nullptr;
          if (!check("connect",
                     net_->connect(dev_, theirHandles[k].data(), &sendComms_[k], &devHandle)))
            return false;
          pending |= sendComms_[k] == nullptr;
        }
        if (recvComms_[k] == nullptr) {
          abi::NetDeviceHandleV8* devHandle = nullptr;
          if (!check("accept", net_->accept(listenComms[k], &recvComms_[k], &devHandle)))
            return false;
          pending |= recvComms_[k] == nullptr;
        }
      }
    }
    if (!pending) break;
    if (std::chrono::steady_clock::now() > deadline) {
      error_ = "plugin connect/accept did not complete within " + std::to_string(kConnectTimeoutS) +
               " s";
      return false;
    }
  }
  for (void*& lc : listenComms) {
    if (lc != nullptr && !check("closeListen", net_->closeListen(lc))) return false;
    lc = nullptr;
  }
  return true;
}

bool PluginEngine::regMr(Dir dir, int peer, int index, void* data, size_t bytes, void** mh) {
  return check("regMr", net_->regMr(comm(dir, peer, index), data, bytes, abi::kPtrHost, mh));
}

bool PluginEngine::deregMr(Dir dir, int peer, int index, void* mh) {
  return check("deregMr", net_->deregMr(comm(dir, peer, index), mh));
}

bool PluginEngine::isend(int peer, int index, void* data, size_t bytes, void* mh, void** request) {
  *request = nullptr;
  return check("isend", net_->isend(comm(Dir::kSend, peer, index), data, static_cast<int>(bytes),
                                    kTag, mh, request));
}

bool PluginEngine::irecv(int peer, int index, void* data, size_t bytes, void* mh, void** request) {
  *request = nullptr;
  void* datas[1] = {data};
  int sizes[1] = {static_cast<int>(bytes)};
  int tags[1] = {kTag};
  void* mhs[1] = {mh};
  return check("irecv",
               net_->irecv(comm(Dir::kRecv, peer, index), 1, datas, sizes, tags, mhs, request));
}

bool PluginEngine::test(void* request, int* done, size_t* bytes) {
  int sizes[1] = {0};
  *done = 0;
  if (!check("test", net_->test(request, done, sizes))) return false;
  if (*done) {
    if (sizes[0] < 0) {
      error_ = "plugin test reported a negative size " + std::to_string(sizes[0]);
      return false;
    }
    *bytes = static_cast<size_t>(sizes[0]);
  }
  return true;
}

bool PluginEngine::close() {
  bool ok = true;
  if (net_ == nullptr) return ok;
  for (void*& c : sendComms_) {
    if (c != nullptr) ok &= check("closeSend", net_->closeSend(c));
    c = nullptr;
  }
  for (void*& c : recvComms_) {
    if (c != nullptr) ok &= check("closeRecv", net_->closeRecv(c));
    c = nullptr;
  }
  return ok;
}

}  // namespace nnf::perf
