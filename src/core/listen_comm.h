// The receiving side of connection set-up: connect messages addressed to its id arrive through
// the device's control channel (a listener posts nothing of its own), and accept() turns each
// valid one into a receive comm.
#pragma once

#include <memory>
#include <vector>

#include "core/comm.h"
#include "core/wire.h"
#include "nccl_net/types.h"

namespace nnf::core {

class RecvComm;

class ListenComm final : public Comm {
 public:
  ListenComm(Device& device, uint32_t id);

  // Non-blocking accept step (device lock held): returns a new receive comm once its accept
  // message has gone out, nullptr while none is ready. Every request received is answered at
  // once, so one peer that never takes its answer does not hold up the others.
  abi::Result accept(RecvComm** out);

  void onControlMessage(wire::ControlKind kind, const uint8_t* data, size_t length,
                        size_t rail) override;
  // A listener posts nothing: no completion ever comes back to it.
  void onComplete(Operation&, size_t) override {}
  void onError(Operation&, int, size_t, const char*) override {}
  int inFlight() const override { return 0; }

 protected:
  void cancelInFlight() override;

 private:
  struct Pending {
    wire::ConnectMessage message;
    size_t rail;  // it came on
  };
  // Who connected (a connect message sent again after its rail broke may arrive twice). A
  // sender's comm id names one connection here: a device hands ids out round-robin.
  struct Connector {
    uint64_t hostId;
    uint32_t pid;
    uint32_t senderCommId;
    bool operator==(const Connector& other) const {
      return hostId == other.hostId && pid == other.pid && senderCommId == other.senderCommId;
    }
  };
  std::vector<Pending> pending_;
  std::vector<Connector> connected_;
  std::vector<RecvComm*> accepting_;  // owned by the device until handed to NCCL
};

}  // namespace nnf::core
