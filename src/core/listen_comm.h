// The receiving side of connection set-up: keeps one receive posted for connect messages
// addressed to its id, and turns each valid one into a receive comm on accept().
#pragma once

#include <deque>
#include <memory>

#include "abi/nccl_abi.h"
#include "core/comm.h"
#include "core/wire.h"

namespace nnf::core {

class RecvComm;

class ListenComm final : public Comm {
 public:
  ListenComm(Device& device, uint32_t id);

  // Posts the first receive for connect messages (device lock held). Returns 0 or a negative
  // libfabric error.
  int start();

  // Non-blocking accept step (device lock held): returns the new receive comm once its accept
  // message has gone out, nullptr while none is ready.
  abi::Result accept(RecvComm** out);

  void onComplete(Operation& op, size_t length) override;
  void onError(Operation& op, int error, size_t overflow, const char* text) override;
  int inFlight() const override { return receive_.inFlight ? 1 : 0; }

 protected:
  void cancelInFlight() override;

 private:
  int postReceive();

  Operation receive_;
  std::deque<wire::ConnectMessage> pending_;
  RecvComm* accepting_ = nullptr;  // owned by the device until handed to NCCL
  abi::Result failure_ = abi::kSuccess;
};

}  // namespace nnf::core
