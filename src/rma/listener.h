// listen(): the handle every rank's connect() reads, and the receiving end of the join messages
// (a rank may join before this rank's own connect has made its group: they wait here).
#pragma once

#include <cstdint>
#include <vector>

#include "core/comm.h"
#include "rma/handles.h"
#include "rma/wire.h"

namespace nnf::rma {

class Group;

class Listener final : public core::Comm {
 public:
  Listener(core::Device& device, uint32_t id, uint64_t nonce);
  ~Listener() override;

  void* handle() { return &ref_; }
  uint64_t nonce() const { return nonce_; }
  Group* group() const { return group_; }

  // --- device lock held ---
  // Joins go to `group` from now on (those that came already first).
  void attach(Group* group);
  void detach() { group_ = nullptr; }
  void onControlMessage(core::wire::ControlKind kind, const uint8_t* data, size_t length,
                        size_t rail) override;
  // A listener posts nothing.
  void onComplete(core::Operation&, size_t) override {}
  void onError(core::Operation&, int, size_t, const char*) override {}
  int inFlight() const override { return 0; }

 protected:
  void cancelInFlight() override;

 private:
  HandleRef ref_;
  uint64_t nonce_;
  Group* group_ = nullptr;
  std::vector<JoinMessage> early_;
  bool warned_ = false;
};

}  // namespace nnf::rma
