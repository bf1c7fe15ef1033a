#include "rma/listener.h"

#include "log/log.h"
#include "rma/group.h"

namespace nnf::rma {

Listener::Listener(core::Device& device, uint32_t id, uint64_t nonce)
    : Comm(device, Kind::kRma, id), nonce_(nonce) {
  ref_.kind = HandleKind::kListener;
  ref_.object = this;
}

Listener::~Listener() {
  ref_.magic = HandleRef::kMagicDead;
}

void Listener::cancelInFlight() {
  ref_.magic = HandleRef::kMagicDead;
  if (group_ != nullptr) group_->onListenerClosed();
  group_ = nullptr;
  early_.clear();
}

void Listener::attach(Group* group) {
  group_ = group;
  std::vector<JoinMessage> early;
  early.swap(early_);
  for (const JoinMessage& join : early) group->onJoin(join);
}

void Listener::onControlMessage(core::wire::ControlKind kind, const uint8_t* data, size_t length,
                                size_t rail) {
  if (kind != core::wire::ControlKind::kRma) return;
  JoinMessage join;
  std::string reason;
  if (!decodeJoin(data, length, &join, &reason) || join.listenerId != id() ||
      join.listenerNonce != nonce_) {
    if (!warned_) {
      warned_ = true;
      NNF_WARN("RMA listener %u: dropped a join message: %s", id(),
               reason.empty() ? "it names another listener" : reason.c_str());
    }
    return;
  }
  if (group_ != nullptr) {
    group_->onJoin(join);
  } else {
    early_.push_back(join);
  }
}

}  // namespace nnf::rma
