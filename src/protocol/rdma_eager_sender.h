// The sender's side of the eager path (rdma_eager.h has the design): the receiver's grant and
// credits, when sends may go eagerly, the eager writes themselves, the answer to the grant, and
// the voids that answer descriptors whose messages went eagerly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/memory_handle.h"
#include "core/operation.h"
#include "core/request.h"
#include "core/send_comm.h"
#include "protocol/rdma_arena_slot.h"
#include "protocol/rdma_device.h"
#include "protocol/rdma_eager.h"
#include "protocol/rdma_eager_credits.h"
#include "protocol/rdma_eager_hold.h"
#include "protocol/rdma_send_close.h"
#include "protocol/rdma_send_eager_mode.h"
#include "protocol/rdma_void_writes.h"
#include "protocol/rdma_wire.h"

namespace nnf::protocol::rdma {

class EagerSender {
 public:
  EagerSender(core::SendComm& comm, RdmaDevice& rdma, const ArenaSlot& ring, SenderClose& close);
  EagerSender(const EagerSender&) = delete;
  EagerSender& operator=(const EagerSender&) = delete;

  // Whether sends may go eagerly now: the receiver granted its entries, and either said that its
  // small receives go undescribed or has been quiet (no descriptor for kEagerQuietNs: it is busy
  // elsewhere, or descheduled; until its next descriptors come). See SendEagerState. None goes
  // while rail recovery holds an entry (rdma_eager_hold.h).
  bool open() {
    return !hold_.any() && mode_.open([this] { return comm_.device().nowNs(); });
  }
  // The entries rail recovery holds (SendRecovery holds and releases them).
  EagerHold& hold() { return hold_; }
  // Whether a send of `size` bytes may go eagerly now (send()'s precondition).
  bool mayGo(size_t size) { return size <= maxBytes_ && open(); }
  size_t maxBytes() const { return maxBytes_; }
  // Whether every entry is held (no eager send can go until credits come back).
  bool entriesFull() const { return credits_.inUse() >= kEagerEntries; }

  // A descriptor group came; `ahead`: it said kEagerAhead. Returns true when the receiver's run
  // of undescribed small receives starts with it (sends waiting may go eagerly now).
  bool onDescriptorGroup(bool ahead) {
    return mode_.onDescriptorGroup(ahead, [this] { return comm_.device().nowNs(); });
  }

  // Writes the send in `request` (its first operation filled by the sender, its pendingSend
  // set; mayGo checked) into the next bounce entry when one is free: true when it went (the
  // request then says how), false when the send must wait for its descriptor.
  bool send(core::Request& request, int32_t tag, uint16_t seq, core::MemoryHandle* handle);
  // A credit write came: `freedMod256` entries freed so far (the first carries the grant).
  void onCredits(uint32_t freedMod256);
  // Answers a descriptor whose message went eagerly: the receiver may then reuse its slot.
  void answerDescriptor(uint32_t slot, uint32_t index, const BufferDescriptor& buffer) {
    if (voids_) voids_->owe(slot, index, buffer);  // none without a grant: nothing went eagerly
  }
  // A write of ours to the receiver completed on `rail`: eager messages may take that rail. (A
  // provider that connects a rail at its first write, tcp beneath the EFA-rules stand-in,
  // completes that write only once the receiver progresses: an eager message must not wait.)
  void onRailReached(size_t rail) { reached_ |= 1u << rail; }
  // One of our own writes ended (the limit write, a void): true when `op` was one.
  bool onOwnCompletion(core::Operation& op, int error);
  // Whether `op` is one of our voids (rail recovery asks about one that failed on a broken rail).
  bool isVoid(const core::Operation& op) const { return voids_ && voids_->owns(op); }
  // Rail recovery let a void's operation go: voids owed meanwhile go on it.
  void postVoids() {
    if (voids_) voids_->postOwed();
  }
  // Our own writes owed or with the provider (the close's answer waits for them).
  int writesPending() const;
  // Each of them (the limit write, the voids).
  template <typename Visit>
  void forEachOwnWrite(Visit&& visit) {
    visit(limitWrite_);
    if (voids_) voids_->forEachWrite(visit);
  }

 private:
  // Tells the receiver the largest message we send eagerly (at its grant, and if that drops to 0).
  void announceLimit();
  bool sendGathered(core::Request& request, core::Operation& op, const EagerHeader* header,
                    int32_t tag, size_t size);
  bool sendHeaderless(core::Request& request, core::Operation& op, int32_t tag, uint16_t seq,
                      uint32_t entry, size_t size);
  bool sendHeaderAhead(core::Request& request, core::Operation& op, const EagerHeader* header,
                       int32_t tag, uint32_t entry, size_t size);
  bool endedByInject(abi::Result injected, core::Request& request, size_t size);
  EagerHeader* headerStaging(uint32_t entry) const;
  // The rail of the next eager message: the rails a write of ours reached in turn, except where
  // the header goes ahead of its message or is left out (shm): those rely on one rail's order.
  // A rail whose path broke is left out (core/rail_health.h, core/path_health.h), unless no
  // reached one is left.
  size_t nextRail() {
    if (rails_ <= 1) return 0;
    uint32_t up = comm_.device().railHealth().usable(rails_, comm_.pathsDown());
    uint32_t usable = reached_ & up;
    // None reached is up (the leader broke first): any rail up, whose first write is slower.
    if (usable == 0) usable = up;
    if (usable == 0) usable = reached_;
    for (size_t tries = 0; tries < rails_; ++tries) {
      size_t rail = nextRail_;
      nextRail_ = rail + 1 == rails_ ? 0 : rail + 1;
      if ((usable & (1u << rail)) != 0) return rail;
    }
    return 0;
  }

  core::SendComm& comm_;
  RdmaDevice& rdma_;
  const ArenaSlot& ring_;  // our eager headers' staging (registered)
  SenderClose& close_;
  EagerCredits credits_;
  Grant grant_{};  // the receiver's bounce area (read at its first credit write)
  SendEagerState mode_;
  EagerHold hold_;
  // Ours and the receiver's entries' size, the smaller (0: nothing goes eagerly, mode kOff).
  size_t maxBytes_ = 0;
  // The provider completes only inline writes while the receiver is busy (shm) and delivers in
  // order: a message that fits the inject size without its header goes as two inline writes.
  bool headerAhead_ = false;
  size_t rails_ = 1;      // rails the eager messages take in turn (1 where the header goes ahead)
  size_t nextRail_ = 0;   // the rail of the next eager message
  uint32_t reached_ = 1;  // rails a write of ours completed on (bit r), the leader's always
  // The tag of the last eager header the receiver surely got (written inline): a message of the
  // same tag that needs its header ahead goes without it (control 6), one write instead of two.
  bool headerSaid_ = false;
  int32_t lastHeaderTag_ = 0;
  // Our answer to the receiver's grant: the largest message we send eagerly (kEagerLimit).
  core::Operation limitWrite_;
  std::unique_ptr<VoidWriter> voids_;
};

}  // namespace nnf::protocol::rdma
