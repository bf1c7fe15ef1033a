#include "rma/api.h"

#include <rdma/fabric.h>

#include <string>

#include "core/device.h"
#include "core/plugin.h"
#include "log/log.h"
#include "rma/context.h"
#include "rma/engine.h"
#include "rma/group.h"
#include "rma/listener.h"
#include "rma/window.h"
#include "rma/wire.h"

namespace nnf::rma {
namespace {

using Lock = std::lock_guard<fabric::DomainLock>;

// What RMA needs of a device's endpoints: writes with immediate data and reads, both ways.
constexpr uint64_t kRmaCaps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_READ | FI_REMOTE_READ;

bool carriesRma(core::Device& device) {
  for (size_t r = 0; r < device.railCount(); ++r) {
    const fi_info* info = device.rail(r).info();
    if ((info->caps & kRmaCaps) != kRmaCaps || device.rail(r).cqDataSize() < 4) return false;
  }
  return true;
}

Group* groupOf(void* collComm, const char* entry) {
  Group* group = fromHandle<Group>(collComm, HandleKind::kGroup);
  if (group == nullptr) NNF_WARN("RMA %s: %p is not an open RMA group", entry, collComm);
  return group;
}

Context* contextOf(void* rmaCtx, const char* entry) {
  Context* context = fromHandle<Context>(rmaCtx, HandleKind::kContext);
  if (context == nullptr) NNF_WARN("RMA %s: %p is not a live RMA context", entry, rmaCtx);
  return context;
}

// A window handle NCCL passed (null stays null: a size-0 put needs none).
bool windowOf(void* mhandle, const char* entry, Window** out) {
  *out = nullptr;
  if (mhandle == nullptr) return true;
  *out = fromHandle<Window>(mhandle, HandleKind::kWindow);
  if (*out != nullptr) return true;
  NNF_WARN("RMA %s: %p is not a registered window (deregistered already?)", entry, mhandle);
  return false;
}

}  // namespace

struct Api::Instance {
  HandleRef ref;
  uint64_t commId = 0;
};

Api& Api::instance() {
  // Never destroyed: NCCL's threads may call in while the process exits.
  static Api* const api = new Api();
  return *api;
}

abi::Result Api::init(void** ctx, uint64_t commId, abi::Logger logger) {
  if (ctx == nullptr) {
    NNF_WARN("RMA init: NULL context pointer");
    return abi::kInternalError;
  }
  abi::Result result = core::Plugin::instance().init(logger);
  if (result != abi::kSuccess) return result;
  auto instance = std::make_unique<Instance>();
  instance->ref.kind = HandleKind::kInstance;
  instance->ref.object = instance.get();
  instance->commId = commId;
  std::lock_guard<std::mutex> lock(mutex_);
  instances_.insert(instance.get());
  *ctx = instance.release();
  return abi::kSuccess;
}

abi::Result Api::finalize(void* ctx) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto* instance = fromHandle<Instance>(ctx, HandleKind::kInstance);
  if (instance == nullptr || instances_.erase(instance) == 0) {
    NNF_WARN("RMA finalize: %p is not an RMA context from init (finalized already?)", ctx);
    return abi::kInternalError;
  }
  instance->ref.magic = HandleRef::kMagicDead;
  delete instance;
  return abi::kSuccess;
}

abi::Result Api::devices(int* count) {
  if (count == nullptr) {
    NNF_WARN("RMA devices: NULL output pointer");
    return abi::kInternalError;
  }
  core::Plugin& plugin = core::Plugin::instance();
  size_t total = plugin.deviceTotal();
  if (total == 0) {
    NNF_WARN("RMA devices called before a successful init");
    return abi::kInternalError;
  }
  for (size_t d = 0; d < total; ++d) {
    core::Device* device = plugin.deviceFor(static_cast<int>(d), "RMA devices");
    if (device != nullptr && carriesRma(*device)) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!reportedNoRma_) {
      reportedNoRma_ = true;
      NNF_INFO(abi::kLogSubsysInit | abi::kLogSubsysNet,
               "RMA: no devices (the endpoints offer no RMA reads and writes with immediate data, "
               "e.g. NCCL_FABRIC_PROTOCOL=sendrecv); NCCL uses its own RMA paths");
    }
    *count = 0;
    return abi::kSuccess;
  }
  *count = static_cast<int>(total);
  return abi::kSuccess;
}

core::Device* Api::rmaDevice(int dev, const char* entry) {
  core::Device* device = core::Plugin::instance().deviceFor(dev, entry);
  if (device == nullptr) return nullptr;  // logged
  if (!carriesRma(*device)) {
    NNF_WARN("RMA %s: device %d carries no RMA (its endpoints lack RMA reads or writes)", entry,
             dev);
    return nullptr;
  }
  return device;
}

abi::Result Api::properties(int dev, const core::DeviceProperties** out) {
  core::Device* device = rmaDevice(dev, "getProperties");
  if (device == nullptr) return abi::kInternalError;
  *out = &device->properties();
  return abi::kSuccess;
}

Engine& Api::engineFor(core::Device& device) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t index = static_cast<size_t>(device.index());
  if (engines_.size() <= index) engines_.resize(index + 1);
  if (!engines_[index]) {
    engines_[index] = std::make_unique<Engine>(device);
    device.setRemoteWriteSink(engines_[index].get());
  }
  return *engines_[index];
}

abi::Result Api::listen(void* ctx, int dev, void* handle, void** listenComm) {
  if (handle == nullptr || listenComm == nullptr) {
    NNF_WARN("RMA listen: NULL handle or output pointer");
    return abi::kInternalError;
  }
  core::Device* device = rmaDevice(dev, "listen");
  if (device == nullptr) return abi::kInternalError;
  const std::vector<uint8_t>& address = device->rail().address();
  if (address.size() > ListenHandle::kMaxAddress) {
    NNF_WARN("RMA listen: the endpoint address of %zu bytes exceeds the handle's %zu",
             address.size(), ListenHandle::kMaxAddress);
    return abi::kSystemError;
  }
  Lock lock(device->domainLock());
  engineFor(*device);
  uint64_t nonce = (uint64_t{device->nextNonce()} << 32) | device->nextNonce();
  Listener* listener = device->createComm<Listener>(nonce);
  if (listener == nullptr) return abi::kSystemError;  // logged
  ListenHandle made =
      makeListenHandle(listener->id(), nonce, device->provider(), address.data(), address.size());
  memcpy(handle, &made, sizeof(made));
  *listenComm = listener->handle();
  return abi::kSuccess;
}

abi::Result Api::connect(void* ctx, void* const* handles, int nranks, int rank, void* listenComm,
                         void** collComm) {
  Listener* listener = fromHandle<Listener>(listenComm, HandleKind::kListener);
  if (listener == nullptr) {
    NNF_WARN("RMA connect: %p is not an open RMA listener", listenComm);
    return abi::kInternalError;
  }
  if (handles == nullptr || collComm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    NNF_WARN("RMA connect: rank %d of %d, or NULL handles or output pointer", rank, nranks);
    return abi::kInvalidUsage;
  }
  core::Device& device = listener->device();
  std::vector<ListenHandle> decoded(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    std::string reason;
    if (handles[r] == nullptr) {
      NNF_WARN("RMA connect: rank %d's handle is NULL", r);
      return abi::kInvalidUsage;
    }
    if (!decodeListenHandle(handles[r], device.provider(), &decoded[static_cast<size_t>(r)],
                            &reason)) {
      NNF_WARN("RMA connect: rank %d's handle is %s", r, reason.c_str());
      return abi::kInvalidUsage;
    }
  }
  const ListenHandle& own = decoded[static_cast<size_t>(rank)];
  if (own.listenerId != listener->id() || own.nonce != listener->nonce()) {
    NNF_WARN("RMA connect: handle %d is not this rank's own listen handle", rank);
    return abi::kInvalidUsage;
  }
  Group* group = nullptr;
  {
    Lock lock(device.domainLock());
    if (listener->group() != nullptr) {
      NNF_WARN("RMA connect: listener %u already made a group", listener->id());
      return abi::kInvalidUsage;
    }
    group = device.createComm<Group>(engineFor(device), static_cast<uint32_t>(rank),
                                     static_cast<uint32_t>(nranks));
    if (group == nullptr) return abi::kSystemError;  // logged
  }
  abi::Result result = group->connect(*listener, decoded);
  if (result != abi::kSuccess) {
    group->close();
    return result;
  }
  *collComm = group->handle();
  {
    std::lock_guard<std::mutex> guard(mutex_);
    openGroups_.insert(*collComm);
  }
  return abi::kSuccess;
}

abi::Result Api::closeListen(void* listenComm) {
  Listener* listener = fromHandle<Listener>(listenComm, HandleKind::kListener);
  if (listener == nullptr) {
    NNF_WARN("RMA closeListen: %p is not an open RMA listener (closed already?)", listenComm);
    return abi::kInternalError;
  }
  core::Device& device = listener->device();
  Lock lock(device.domainLock());
  device.closeComm(*listener);
  return abi::kSuccess;
}

abi::Result Api::closeColl(void* collComm) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (openGroups_.erase(collComm) == 0) {
      NNF_WARN("RMA %s: %p is not an open RMA group", "closeColl", collComm);
      return abi::kInternalError;
    }
  }
  Group* group = groupOf(collComm, "closeColl");
  return group != nullptr ? group->close() : abi::kInternalError;
}

abi::Result Api::createContext(void* collComm, int streams, void** rmaCtx) {
  Group* group = groupOf(collComm, "createContext");
  if (group == nullptr) return abi::kInternalError;
  if (rmaCtx == nullptr || streams < 1) {
    NNF_WARN("RMA createContext: %d contexts requested, or NULL output pointer", streams);
    return abi::kInvalidUsage;
  }
  Context* context = nullptr;
  abi::Result result = group->createContext(streams, &context);
  if (result == abi::kSuccess) *rmaCtx = context->handle();
  return result;
}

abi::Result Api::destroyContext(void* rmaCtx) {
  Context* context = contextOf(rmaCtx, "destroyContext");
  return context != nullptr ? context->group().destroyContext(*context) : abi::kInternalError;
}

abi::Result Api::regMrSym(void* collComm, void* data, size_t size, int type, uint64_t dmabufOffset,
                          int fd, uint64_t flags, void** mhandle) {
  Group* group = groupOf(collComm, "regMrSym");
  if (group == nullptr) return abi::kInternalError;
  if (mhandle == nullptr || (data == nullptr && size > 0)) {
    NNF_WARN("RMA regMrSym: NULL buffer or output pointer");
    return abi::kInternalError;
  }
  if (type != abi::kPtrHost && type != abi::kPtrCuda && type != abi::kPtrDmaBuf) {
    NNF_WARN("RMA regMrSym: unknown memory type %d", type);
    return abi::kInvalidUsage;
  }
  Window* window = nullptr;
  abi::Result result = group->registerWindow(data, size, type, dmabufOffset, fd, flags, &window);
  if (result == abi::kSuccess) *mhandle = &window->ref;
  return result;
}

abi::Result Api::deregMrSym(void* collComm, void* mhandle) {
  Group* group = groupOf(collComm, "deregMrSym");
  if (group == nullptr) return abi::kInternalError;
  Window* window = fromHandle<Window>(mhandle, HandleKind::kWindow);
  if (window == nullptr || window->group != group) {
    NNF_WARN(
        "RMA deregMrSym: %p is not a registered window of this group (deregistered "
        "already?)",
        mhandle);
    return abi::kInternalError;
  }
  return group->deregisterWindow(*window);
}

abi::Result Api::put(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                     uint64_t dstOff, void* dstMhandle, uint32_t rank, const SignalSpec* signal,
                     void** request) {
  const char* entry = signal != nullptr ? "iputSignal" : "iput";
  Context* ctx = contextOf(rmaCtx, entry);
  if (ctx == nullptr) return abi::kInternalError;
  if (request == nullptr) {
    NNF_WARN("RMA %s: NULL request pointer", entry);
    return abi::kInternalError;
  }
  Window* src = nullptr;
  Window* dst = nullptr;
  if (!windowOf(srcMhandle, entry, &src) || !windowOf(dstMhandle, entry, &dst))
    return abi::kInternalError;
  SignalArgs args;
  if (signal != nullptr) {
    if (!windowOf(signal->window, entry, &args.window)) return abi::kInternalError;
    args.offset = signal->offset;
    args.value = signal->value;
    args.op = signal->op;
    args.strong = signal->strong;
  }
  Request* made = nullptr;
  abi::Result result = ctx->group().put(*ctx, context, src, srcOff, size, dst, dstOff, rank,
                                        signal != nullptr ? &args : nullptr, &made);
  if (result == abi::kSuccess) *request = made;
  return result;
}

abi::Result Api::get(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle,
                     size_t size, uint64_t localOff, void* localMhandle, uint32_t rank,
                     void** request) {
  Context* ctx = contextOf(rmaCtx, "iget");
  if (ctx == nullptr) return abi::kInternalError;
  if (request == nullptr) {
    NNF_WARN("RMA iget: NULL request pointer");
    return abi::kInternalError;
  }
  Window* remote = nullptr;
  Window* local = nullptr;
  if (!windowOf(remoteMhandle, "iget", &remote) || !windowOf(localMhandle, "iget", &local))
    return abi::kInternalError;
  Request* made = nullptr;
  abi::Result result =
      ctx->group().get(*ctx, context, remote, remoteOff, size, local, localOff, rank, &made);
  if (result == abi::kSuccess) *request = made;
  return result;
}

abi::Result Api::flush(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request) {
  Context* ctx = contextOf(rmaCtx, "iflush");
  if (ctx == nullptr) return abi::kInternalError;
  if (request == nullptr) {
    NNF_WARN("RMA iflush: NULL request pointer");
    return abi::kInternalError;
  }
  Window* window = nullptr;
  if (!windowOf(mhandle, "iflush", &window)) return abi::kInternalError;
  Request* made = nullptr;
  abi::Result result = ctx->group().flush(*ctx, context, window, rank, &made);
  if (result == abi::kSuccess) *request = made;
  return result;
}

abi::Result Api::test(void* collComm, void* request, int* done) {
  Group* group = groupOf(collComm, "test");
  if (group == nullptr) return abi::kInternalError;
  auto* req = static_cast<Request*>(request);
  if (req == nullptr || done == nullptr || req->magic != Request::kMagic) {
    NNF_WARN("RMA test: %p is not a request of this plugin (or NULL done pointer)", request);
    return abi::kInternalError;
  }
  return group->test(*req, done);
}

abi::Result Api::progress(void* rmaCtx) {
  Context* ctx = contextOf(rmaCtx, "rmaProgress");
  return ctx != nullptr ? ctx->group().progress() : abi::kInternalError;
}

abi::Result Api::queryLastError(void* rmaCtx, bool* hasError) {
  Context* ctx = contextOf(rmaCtx, "queryLastError");
  if (ctx == nullptr) return abi::kInternalError;
  if (hasError == nullptr) {
    NNF_WARN("RMA queryLastError: NULL output pointer");
    return abi::kInternalError;
  }
  *hasError = ctx->group().failed();
  return abi::kSuccess;
}

}  // namespace nnf::rma
