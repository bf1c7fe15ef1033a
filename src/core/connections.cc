// Connection set-up and teardown entry points: listen, connect, accept and the three closes.
#include <cstring>
#include <thread>

#include "core/clock.h"
#include "core/listen_comm.h"
#include "core/plugin.h"
#include "core/recv_comm.h"
#include "core/send_comm.h"
#include "core/tags.h"
#include "core/wire.h"
#include "log/log.h"

namespace nnf::core {

namespace {
const char* const kKindNames[] = {"listen", "send", "receive"};
}  // namespace

template <typename CommType>
CommType* Plugin::checkComm(void* comm, Comm::Kind kind, const char* caller) {
  if (comm == nullptr) {
    NNF_WARN("%s: NULL %s comm", caller, kKindNames[static_cast<int>(kind)]);
    return nullptr;
  }
  Comm* base = Comm::fromHandle(comm);
  if (base == nullptr || !base->alive()) {
    NNF_WARN("%s: %p is not an open comm (closed already, or never created)", caller, comm);
    return nullptr;
  }
  if (base->kind() != kind) {
    NNF_WARN("%s: %p is a %s comm, expected a %s comm", caller, comm,
             kKindNames[static_cast<int>(base->kind())], kKindNames[static_cast<int>(kind)]);
    return nullptr;
  }
  return static_cast<CommType*>(base);
}

template ListenComm* Plugin::checkComm<ListenComm>(void*, Comm::Kind, const char*);
template SendComm* Plugin::checkComm<SendComm>(void*, Comm::Kind, const char*);
template RecvComm* Plugin::checkComm<RecvComm>(void*, Comm::Kind, const char*);

abi::Result Plugin::listen(int dev, void* handle, void** out) {
  Device* device = this->device(dev, "listen");
  if (device == nullptr) return abi::kInternalError;
  if (handle == nullptr || out == nullptr) {
    NNF_WARN("listen: NULL handle or comm pointer");
    return abi::kInternalError;
  }
  std::lock_guard<fabric::DomainLock> lock(device->domainLock());
  ListenComm* comm = device->createComm<ListenComm>();
  if (comm == nullptr) return abi::kSystemError;
  const auto& address = device->rail().address();
  // The other rails' addresses, where they are as long as the leader's: the handle keeps those
  // that fit, for a peer whose path to our leader is down.
  const uint8_t* moreRails[wire::kMaxRails - 1];
  size_t more = 0;
  while (more + 1 < device->railCount() &&
         device->rail(more + 1).address().size() == address.size()) {
    moreRails[more] = device->rail(more + 1).address().data();
    ++more;
  }
  wire::ListenHandle encoded;
  try {
    encoded = wire::makeListenHandle(comm->id(), device->provider(), address.data(), address.size(),
                                     moreRails, more);
  } catch (const std::exception& error) {
    NNF_WARN("listen on device %d: %s", dev, error.what());
    device->closeComm(*comm);
    return abi::kSystemError;
  }
  memcpy(handle, &encoded, sizeof(encoded));
  track(comm->handle());
  *out = comm->handle();
  return abi::kSuccess;
}

abi::Result Plugin::connect(int dev, void* handle, void** out) {
  Device* device = this->device(dev, "connect");
  if (device == nullptr) return abi::kInternalError;
  if (out == nullptr) {
    NNF_WARN("connect: NULL comm pointer");
    return abi::kInternalError;
  }
  *out = nullptr;
  wire::ListenHandle decoded;
  std::string reason;
  if (!wire::decodeListenHandle(handle, sizeof(wire::ListenHandle), device->provider(), &decoded,
                                &reason)) {
    NNF_WARN("connect on device %d: invalid handle: %s", dev, reason.c_str());
    return abi::kInternalError;
  }

  std::lock_guard<fabric::DomainLock> lock(device->domainLock());
  SendComm* comm = nullptr;
  if (decoded.connectToken == 0) {
    comm = device->createComm<SendComm>(static_cast<size_t>(device->properties().maxRecvs));
    if (comm == nullptr) return abi::kSystemError;
    abi::Result result = comm->start(decoded);
    if (result != abi::kSuccess) {
      device->closeComm(*comm);
      return result;
    }
    // Remember the connection in progress inside NCCL's copy of the handle.
    uint64_t token = comm->token();
    memcpy(static_cast<uint8_t*>(handle) + offsetof(wire::ListenHandle, connectToken), &token,
           sizeof(token));
  } else {
    Comm* found = device->findComm(static_cast<uint32_t>(decoded.connectToken & tags::kMaxCommId));
    if (found == nullptr || found->kind() != Comm::Kind::kSend ||
        static_cast<SendComm*>(found)->token() != decoded.connectToken) {
      NNF_WARN("connect on device %d: the handle names a connection that does not exist", dev);
      return abi::kInternalError;
    }
    comm = static_cast<SendComm*>(found);
  }

  abi::Result result = device->progress();
  if (result != abi::kSuccess) return result;
  if (comm->failed()) {
    device->closeComm(*comm);
    return abi::kRemoteError;
  }
  if (comm->ready()) {
    // The handle may be used again for another connection.
    memset(static_cast<uint8_t*>(handle) + offsetof(wire::ListenHandle, connectToken), 0,
           sizeof(uint64_t));
    track(comm->handle());
    *out = comm->handle();
  }
  return abi::kSuccess;
}

abi::Result Plugin::accept(void* listenComm, void** out) {
  ListenComm* comm = checkComm<ListenComm>(listenComm, Comm::Kind::kListen, "accept");
  if (comm == nullptr) return abi::kInternalError;
  if (out == nullptr) {
    NNF_WARN("accept: NULL comm pointer");
    return abi::kInternalError;
  }
  Device& device = comm->device();
  std::lock_guard<fabric::DomainLock> lock(device.domainLock());
  abi::Result result = device.progress();
  if (result != abi::kSuccess) return result;
  RecvComm* accepted = nullptr;
  result = comm->accept(&accepted);
  if (result == abi::kSuccess && accepted != nullptr) {
    track(accepted->handle());
    *out = accepted->handle();
  }
  return result;
}

namespace {

// How often a closing comm asks whether its peer is still alive (a syscall on this host).
constexpr uint64_t kClosePeerCheckNs = 1000000;

// Closes `comm` and returns once the provider holds none of its operations on the caller's
// buffers: posted receives are cancelled, receives that already matched and sends complete (the
// peer's drains, kept going by its device's ProgressKeeper, take what we sent). The wait ends
// early when the peer is found dead (it sends and reads nothing more). A live peer that takes
// nothing more for `limitMs` (no operation of the comm ended meanwhile) ends it too, and the
// close then fails: the provider may still touch those buffers, so they must not be freed.
abi::Result closeAndWait(Device& device, Comm& comm, int64_t limitMs) {
  const uint32_t id = comm.id();
  const Comm::Kind kind = comm.kind();
  const uint64_t start = nowNs();
  const uint64_t limitNs = static_cast<uint64_t>(limitMs) * 1000000;
  uint64_t nextCheck = start;
  uint64_t lastMoveNs = start;
  bool gone = false;
  int left = 0;
  {
    std::lock_guard<fabric::DomainLock> lock(device.domainLock());
    device.closeComm(comm, /*hold=*/true);
    left = comm.callerOpsInFlight();
  }
  for (;;) {
    {
      std::lock_guard<fabric::DomainLock> lock(device.domainLock());
      device.progress();
      int nowLeft = comm.callerOpsInFlight();
      uint64_t now = nowNs();
      if (nowLeft < left) lastMoveNs = now;  // the peer is taking what we have in flight
      left = nowLeft;
      if (left == 0) break;
      if (now >= nextCheck) {
        nextCheck = now + kClosePeerCheckNs;
        if (comm.peerGone()) {
          // What the peer had already sent is in the provider now: let it land before returning.
          device.progress();
          left = comm.callerOpsInFlight();
          gone = true;
          break;
        }
      }
      if (limitMs > 0 && now - lastMoveNs >= limitNs) break;
    }
    std::this_thread::yield();
  }
  {
    std::lock_guard<fabric::DomainLock> lock(device.domainLock());
    device.releaseClosed(comm);  // frees it unless set-up messages or pings are still out
  }
  // Registrations NCCL deregistered while the closed comm's sender could still write into them.
  device.memory().releaseOwed();
  double ms = static_cast<double>(nowNs() - start) / 1e6;
  if (left == 0) {
    NNF_TRACE("comm %u closed in %.3f ms", id, ms);
    return abi::kSuccess;
  }
  if (gone) {
    NNF_INFO(abi::kLogSubsysNet,
             "comm %u closed after its peer died, %d operation(s) left to the provider (%.1f ms)",
             id, left, ms);
    return abi::kSuccess;
  }
  NNF_WARN(
      "closing %s comm %u failed: its peer is alive but took nothing for %lld ms "
      "(NCCL_FABRIC_CLOSE_TIMEOUT_MS), and the provider still holds %d operation(s) on the "
      "comm's buffers; they are unsafe to free. The comm is left to the device, which ends them "
      "when the peer takes them or dies",
      kKindNames[static_cast<int>(kind)], id, static_cast<long long>(limitMs), left);
  return abi::kRemoteError;
}
}  // namespace

abi::Result Plugin::closeListen(void* listenComm) {
  if (listenComm != nullptr && !tracked(listenComm)) {
    NNF_WARN("closeListen: %p is not an open comm (closed already, or never created)", listenComm);
    return abi::kInternalError;
  }
  ListenComm* comm = checkComm<ListenComm>(listenComm, Comm::Kind::kListen, "closeListen");
  if (comm == nullptr) return abi::kInternalError;
  untrack(comm->handle());
  return closeAndWait(comm->device(), *comm, config_->integer(config::Param::kCloseTimeoutMs));
}

abi::Result Plugin::closeSend(void* sendComm) {
  if (sendComm != nullptr && !tracked(sendComm)) {
    NNF_WARN("closeSend: %p is not an open comm (closed already, or never created)", sendComm);
    return abi::kInternalError;
  }
  SendComm* comm = checkComm<SendComm>(sendComm, Comm::Kind::kSend, "closeSend");
  if (comm == nullptr) return abi::kInternalError;
  untrack(comm->handle());
  return closeAndWait(comm->device(), *comm, config_->integer(config::Param::kCloseTimeoutMs));
}

abi::Result Plugin::closeRecv(void* recvComm) {
  if (recvComm != nullptr && !tracked(recvComm)) {
    NNF_WARN("closeRecv: %p is not an open comm (closed already, or never created)", recvComm);
    return abi::kInternalError;
  }
  RecvComm* comm = checkComm<RecvComm>(recvComm, Comm::Kind::kRecv, "closeRecv");
  if (comm == nullptr) return abi::kInternalError;
  untrack(comm->handle());
  return closeAndWait(comm->device(), *comm, config_->integer(config::Param::kCloseTimeoutMs));
}

}  // namespace nnf::core
