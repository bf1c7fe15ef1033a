// A comm's own write into its peer's arena slot (descriptors, credits, the eager limit).
#pragma once

#include "core/data_comm.h"
#include "core/device.h"
#include "core/operation.h"
#include "log/log.h"

namespace nnf::protocol::rdma {

// The rail a comm's own writes go on: the first of its rails that is up and whose path to the
// peer is not broken (the leader while it works).
inline size_t ownWriteRail(const core::Device& device, const core::DataComm& comm) {
  return comm.rails() > 1 ? device.railHealth().firstUp(comm.rails(), comm.pathsDown()) : 0;
}

// A comm's own write failed with `error`: when that says its rail's path broke and another of
// the comm's rails is up, the same write goes again there, with that rail's key (`keys`), the
// source's descriptor there (`source`) and the peer's address (true: in flight again).
inline bool writeOwnAgain(core::Device& device, const core::DataComm& comm, core::Operation& write,
                          const uint64_t* keys, const core::ControlSlot* source, int error) {
  int rail = device.railHealth().railInsteadOf(write.rail, error, comm.rails(), comm.pathsDown());
  if (rail < 0) return false;
  NNF_INFO(abi::kLogSubsysNet,
           "comm %u: its own %zu-byte write failed with rail %u; written again on rail %d",
           comm.id(), write.length, write.rail, rail);
  write.rail = static_cast<uint8_t>(rail);
  write.peer = comm.peer(rail);
  write.remoteKey = keys[rail];
  if (source != nullptr) write.desc = source->descOf(rail);
  return device.post(write) == abi::kSuccess;
}

// Inline where nothing can overtake it (the close notice follows on the same endpoint), so no
// completion is read and the source is free on return; posted where the provider delivers out of
// order or has no room, and on a comm of several rails (a failed inject names no operation, so
// that a rail's failure would lose the write unseen).
inline abi::Result writeOwn(core::Device& device, core::Operation& write) {
  abi::Result result = abi::kInProgress;
  if (device.deliversInOrder() && write.length <= device.injectLimit() && device.railCount() == 1) {
    result = device.inject(write);
  }
  return result == abi::kInProgress ? device.post(write) : result;
}

}  // namespace nnf::protocol::rdma
