// The sending end of a connection: sends the connect message to the listener and waits for the
// accept message that names the receive comm.
#pragma once

#include "core/data_comm.h"
#include "core/wire.h"

namespace nnf::core {

class SendComm final : public DataComm {
 public:
  SendComm(Device& device, uint32_t id, size_t maxRecvs);

  // Registers the listener's address and posts the set-up messages (device lock held).
  abi::Result start(const wire::ListenHandle& handle);
  bool ready() const { return state_ == State::kReady; }
  bool failed() const { return state_ == State::kFailed; }
  // Identifies this connection in NCCL's copy of the handle between connect() calls.
  uint64_t token() const { return token_; }
  // The accept message (through the device's control channel).
  void onControlMessage(wire::ControlKind kind, const uint8_t* data, size_t length,
                        size_t rail) override;

 protected:
  void onControlComplete(Operation& op, size_t length) override;
  void onControlError(Operation& op, int error, const char* text) override;
  Operation& setUpSend() override { return connectSend_; }

 private:
  enum class State { kConnecting, kReady, kFailed };
  void updateState();

  State state_ = State::kConnecting;
  uint64_t token_;
  bool connectSent_ = false;
  bool acceptReceived_ = false;
  Operation connectSend_;
};

}  // namespace nnf::core
