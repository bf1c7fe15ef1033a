// The receiving end of a connection. It answers the connect message with its own id (which
// senders put into every data tag) and then receives data.
#pragma once

#include "core/data_comm.h"
#include "core/wire.h"

namespace nnf::core {

class RecvComm final : public DataComm {
 public:
  RecvComm(Device& device, uint32_t id, size_t maxRecvs);

  // Registers the peer and sends the accept message (device lock held), on the rail the connect
  // message came on while it is up.
  abi::Result start(const wire::ConnectMessage& request, size_t arrivalRail);
  bool ready() const { return state_ == State::kReady; }
  bool failed() const { return state_ == State::kFailed; }
  size_t maxRecvs() const { return maxRecvs_; }
  // The sender's answer to our close (through the device's control channel).
  void onControlMessage(wire::ControlKind kind, const uint8_t* data, size_t length,
                        size_t rail) override;

 protected:
  void onControlComplete(Operation& op, size_t length) override;
  void onControlError(Operation& op, int error, const char* text) override;
  Operation& setUpSend() override { return acceptSend_; }

 private:
  enum class State { kAccepting, kReady, kFailed };
  State state_ = State::kAccepting;
  size_t maxRecvs_;
  bool protocolMismatch_ = false;  // answered, then failed: the peer moves data another way
  Operation acceptSend_;
};

}  // namespace nnf::core
