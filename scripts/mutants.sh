#!/usr/bin/env bash
# Mutation check: breaks critical checks of the plugin on purpose, one at a time, and makes sure
# a test notices. For each mutant below the script replaces one line of the source, rebuilds
# the mutant's test targets incrementally, runs their tests (gtest filter) and reports KILLED
# (a test failed, crashed or timed out) or SURVIVED (every test passed: a weakness in the
# tests). The source is restored after each mutant, and the targets rebuilt from it at the end.
#
#   scripts/mutants.sh                     # every mutant, build folder build-lf2
#   scripts/mutants.sh wire- mr-           # only the mutants whose names start with these
#   MUTANTS_BUILD_DIR=build scripts/mutants.sh
#   MUTANTS_BASELINE=0 scripts/mutants.sh  # skip the run of the tests on the unmodified tree
#   MUTANTS_TIMEOUT=600 scripts/mutants.sh # seconds per test binary (default 300)
#
# Exit status: 0 when every mutant was killed; 1 when one survived; 2 when the table no longer
# matches the source (an original line not found exactly once), a mutant does not compile, or
# the unmodified tree already fails its tests. About 10 minutes for the whole table on 2 cores
# (build-lf2 already built; half that once ccache has seen the mutants): not in CI.
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true  # "&" in a replacement stays "&"
cd "$(dirname "$0")/.."
build=${MUTANTS_BUILD_DIR:-build-lf2}
timeout_s=${MUTANTS_TIMEOUT:-300}

# ---------------------------------------------------------------------------------------------
# The mutants. One call per mutant:
#   mutant NAME FILE ORIGINAL REPLACEMENT TARGETS FILTER ENV
# ORIGINAL is a fixed string (no pattern) that must occur exactly once in FILE; keep it short
# and distinctive, so that unrelated edits around it do not break it. TARGETS are test
# executables (comma-separated) built with cmake --build and run from $build/tests with
# --gtest_filter=FILTER; ENV is what the tests need (the provider of functional tests), or "-".
# ---------------------------------------------------------------------------------------------
table() {
  # Listen-handle validation: a handle that is not exactly ours must never reach the address
  # vector.
  mutant wire-handle-checksum src/core/wire.cc \
    'if (handle.checksum != handleChecksum(handle)) {' 'if (false) {' \
    wire_test 'ListenHandle.*' -
  mutant wire-handle-provider src/core/wire.cc \
    'if (handle.providerHash != providerHash(provider)) {' 'if (false) {' \
    wire_test 'ListenHandle.*' -
  mutant wire-handle-address-length src/core/wire.cc \
    'if (handle.addressLength == 0 || handle.addressLength > kMaxAddressLength) {' 'if (false) {' \
    wire_test 'ListenHandle.*' -
  mutant wire-handle-listener-id src/core/wire.cc \
    'if (handle.listenerId > tags::kMaxCommId) {' 'if (false) {' \
    wire_test 'ListenHandle.*' -

  # Truncation: a send larger than its receive fails the receive with ncclInternalError, never
  # silently.
  mutant trunc-reported-as-peer-error src/core/data_comm.cc \
    'if (error == FI_ETRUNC) {' 'if (false) {' \
    errors_test 'Sizes/TruncatingReceive.*' NNF_TEST_PROVIDER=tcp
  mutant trunc-silent src/core/data_comm.cc \
    'if (error == FI_ETRUNC) {' \
    'if (error == FI_ETRUNC) { request->state = Request::State::kActive; op.transferred = op.length; if (request->remaining == 0) finish(*request); return; } if (false) {' \
    errors_test 'Sizes/TruncatingReceive.*' NNF_TEST_PROVIDER=tcp

  # Sizes reported by test(): what arrived, per buffer of a grouped receive.
  mutant sizes-posted-not-received src/core/data_comm.cc \
    'op.transferred = op.type == OpType::kSend ? op.length : length;' 'op.transferred = op.length;' \
    transfer_test,grouped_test 'Transfer.ReceiveLargerThanSendReportsTheRealSize:GroupedReceive.*' \
    NNF_TEST_PROVIDER=shm
  mutant sizes-first-buffer-only src/core/data_path.cc \
    'sizes[i] = req->ops[i].transferred;' 'sizes[i] = req->ops[0].transferred;' \
    transfer_test,grouped_test 'Transfer.ReceiveLargerThanSendReportsTheRealSize:GroupedReceive.*' \
    NNF_TEST_PROVIDER=shm

  # Registration reference counts: a registration lives while any regMr of it does, and no
  # longer.
  mutant mr-hit-takes-no-reference src/memory/mr_cache.cc \
    '++hit->refs_;' '(void)hit->refs_;' \
    mr_cache_test,memory_registry_test '*' -
  mutant mr-released-one-early src/memory/mr_cache.cc \
    'if (--handle->refs_ > 0) return 0;' 'if (--handle->refs_ > 1) return 0;' \
    mr_cache_test,memory_registry_test '*' -
  mutant mr-double-release-accepted src/memory/mr_cache.cc \
    '|| handle->refs_ <= 0) {' ') {' \
    mr_cache_test,memory_registry_test '*' -
  mutant registry-dereg-keeps-registration src/core/memory_registry.cc \
    'if (handle->mr != nullptr && cache_.release(handle->mr) != 0)' 'if (false)' \
    memory_registry_test '*' -

  # Close and drain: close returns only when the provider holds none of the comm's caller
  # buffers, and what the peer still sends to a closed comm is consumed.
  mutant close-returns-at-once src/core/connections.cc \
    'if (left == 0) break;' 'break;' \
    close_test 'Close/Abort.*' 'NNF_TEST_PROVIDER=shm NNF_CLOSE_ROUNDS=2'
  mutant close-frees-comm-in-flight src/core/device.cc \
    'if (comm.inFlight() == 0) destroyComm(comm);' 'destroyComm(comm);' \
    close_test 'Close/Abort.*:Close.AGivenUpCloseKeepsItsCommUntilTheProviderReturnsItsSends' \
    'NNF_TEST_PROVIDER=shm NNF_CLOSE_ROUNDS=2'
  mutant drain-not-reposted src/core/drain_pool.cc \
    'if (device_.post(entry->op) == abi::kSuccess) return;' 'return;' \
    close_test 'Close.MessagesForClosedCommsAreDrained' 'NNF_TEST_PROVIDER=shm NNF_DRAIN_MESSAGES=2000'
  # The rdma protocol: truncation known before a byte moves; matching by (tag, sequence);
  # a buffer completes only when every segment has landed.
  mutant rdma-truncation-unchecked src/protocol/rdma_striping.cc \
    'if (total > buffer.size) {' 'if (false) {' \
    errors_test 'Sizes/TruncatingReceive.*' NNF_TEST_PROVIDER=tcp+rdma
  mutant rdma-match-tag-only src/protocol/rdma_matching.h \
    'if (descriptors_[i].tag == tag && descriptors_[i].seq == seq) {' \
    'if (descriptors_[i].tag == tag) {' \
    rdma_matching_test '*' -
  mutant rdma-first-segment-completes src/protocol/rdma_slot_progress.h \
    'if (++buffer.seen < segments) {' '++buffer.seen; if (false) {' \
    rdma_matching_test '*' -

  # The rdma protocol's state machines (docs/architecture.md): each mutant breaks one
  # transition. The unit tests drive the machines themselves (rdma_states_test, and the older
  # rdma_matching_test and rdma_eager_test); the functional tests run them in the plugin.
  # A receive slot freed while the sender still owes voids for it: its ring entry may be
  # overwritten before the sender read the descriptors that the voids answer.
  mutant state-slot-freed-before-its-voids src/protocol/rdma_slot_lifecycle.h \
    'bool voidsOwed = buffers.voidsOwed();' 'bool voidsOwed = false;' \
    rdma_states_test '*' -
  # The same, at a void: a slot freed at its first void while a second is still owed.
  mutant state-slot-freed-at-its-first-void src/protocol/rdma_slot_lifecycle.h \
    '|| buffers.voidsOwed()) return false;' ') return false;' \
    rdma_states_test '*' -
  # A buffer whose message ended takes segments again: counted twice.
  mutant state-buffer-counted-twice src/protocol/rdma_slot_progress.h \
    'kGroup || !acceptsSegments(buffers_[index].state)' 'kGroup' \
    rdma_matching_test,rdma_states_test '*' -
  # A buffer an eager message filled owes no void for its descriptor.
  mutant state-buffer-eager-owes-no-void src/protocol/rdma_slot_progress.h \
    'described && now == BufferState::kExpecting ? BufferState::kAwaitingVoid' \
    'false ? BufferState::kAwaitingVoid' \
    rdma_eager_test,rdma_states_test '*' -
  # The void a buffer awaits is not counted: its slot is never freed.
  mutant state-buffer-void-not-counted src/protocol/rdma_slot_progress.h \
    'if (buffer.state == BufferState::kAwaitingVoid) {' 'if (false) {' \
    rdma_eager_test,rdma_states_test '*' -
  # The sender's close answer goes with writes of its own still in flight: the receiver's close
  # stops waiting for writes that are still on their way (the machine, then the plugin).
  mutant state-close-answered-with-a-write-in-flight src/protocol/rdma_send_close_state.h \
    'if (answer_ != CloseAnswer::kOwed || !idle) return false;' \
    'if (answer_ != CloseAnswer::kOwed) return false;' \
    rdma_states_test '*' -
  mutant state-close-answered-with-a-write-in-flight-plugin src/protocol/rdma_send_close.cc \
    'bool idle = comm_.callerOpsInFlight() == 0 && !answerPending() && writesPending == 0;' \
    'bool idle = true;' \
    close_test 'Close.TheSendersCloseAnswerCountsTheWritesItClosedWith' \
    NNF_TEST_PROVIDER=efa+rdma+2rails
  # The receiver's close stops waiting at the sender's answer, before its counted writes landed.
  mutant state-recv-close-ends-at-the-answer src/protocol/rdma_recv_close_state.h \
    'toWait(allLanded() ? RecvCloseWait::kDone : RecvCloseWait::kAwaitingWrites);
  }' \
    'toWait(RecvCloseWait::kDone);
  }' \
    rdma_states_test '*' -
  mutant state-recv-close-ends-at-the-answer-plugin src/protocol/rdma_recv_close_state.h \
    'toWait(allLanded() ? RecvCloseWait::kDone : RecvCloseWait::kAwaitingWrites);
  }' \
    'toWait(RecvCloseWait::kDone);
  }' \
    close_test 'Close.ARecvCloseWaitsForWritesStillOnTheirWayOnAnotherRail' \
    NNF_TEST_PROVIDER=efa+rdma+2rails
  # The close notice goes while descriptor writes of ours may still land in the sender's ring.
  mutant state-notice-before-the-last-descriptor-write src/protocol/rdma_recv_close_state.h \
    'toNotice(writesInFlight ? CloseNotice::kOwed : CloseNotice::kSent);
    return !writesInFlight;' \
    'toNotice(CloseNotice::kSent);
    return true;' \
    rdma_states_test '*' -
  # The descriptor ring goes back to the arena while the receiver may still write into it.
  mutant state-ring-reused-before-the-receiver-closed src/protocol/rdma_send_close_state.h \
    'if (holding) return true;' 'if (false) return true;' \
    rdma_states_test '*' -
  # Eager mode left on after the run ends: the sender keeps sending small messages eagerly
  # after a group that did not say kEagerAhead (each then crosses its descriptor); the receiver
  # keeps leaving small receives undescribed after a group described without it.
  mutant state-send-eager-mode-left-on-after-the-run src/protocol/rdma_send_eager_mode.h \
    'if (sending) to(ahead ? SendEagerMode::kAhead : SendEagerMode::kDescribed);' \
    'if (sending && ahead) to(SendEagerMode::kAhead);' \
    rdma_states_test '*' -
  mutant state-recv-eager-mode-left-on-after-the-run src/protocol/rdma_recv_eager_mode.h \
    'to(ahead ? RecvEagerMode::kAhead : RecvEagerMode::kDescribing);' \
    'if (ahead) to(RecvEagerMode::kAhead);' \
    rdma_states_test '*' -
  # A quiet receiver's time is not ended by its next descriptor group.
  mutant state-send-eager-quiet-never-ends src/protocol/rdma_send_eager_mode.h \
    '|| mode_ == SendEagerMode::kQuiet)' ')' \
    rdma_states_test '*' -
  # The bounce area is granted before the comm's first message landed.
  mutant state-recv-grant-before-the-first-message src/protocol/rdma_recv_eager_mode.h \
    'bool grantDue() const { return mode_ == RecvEagerMode::kLanded; }' \
    'bool grantDue() const { return mode_ <= RecvEagerMode::kLanded; }' \
    rdma_states_test '*' -

  # The eager path (issue 25): the sender never has more eager messages out than the entries the
  # receiver freed (a credit ahead overwrites an entry whose message no receive took yet), and
  # an entry is the sender's again only once the NIC has copied its message into GPU memory.
  mutant eager-credits-one-ahead src/protocol/rdma_eager_receiver.cc \
    'write.tag = encodeCredits(comm_.remoteId(), static_cast<uint32_t>(freed & 0xff));' \
    'write.tag = encodeCredits(comm_.remoteId(), static_cast<uint32_t>((freed + 1) & 0xff));' \
    eager_test 'Eager.TheSenderNeverGoesBeyondTheEntriesTheReceiverFreed' NNF_TEST_PROVIDER=tcp+rdma
  mutant eager-entry-freed-when-its-read-is-posted src/protocol/rdma_eager_receiver.cc \
    '    inbox_.copying(entry);' '    freeEntry(entry);' \
    efa_plugin_test 'EfaPlugin.ABounceEntryIsNotReusedWhileTheNicStillCopiesOutOfIt' -
  mutant eager-entry-being-read-counts-as-freed src/protocol/rdma_eager_inbox.h \
    'entries_[entry].state = State::kCopying;' 'entries_[entry].state = State::kFreed;' \
    rdma_eager_test 'RdmaEagerInbox.*' -

  # Per-tag sequence numbers across their 16-bit wrap (NCCL_FABRIC_SEQUENCE_START near it): a
  # descriptor or an eager message is behind its tag's next number only modulo 2^16.
  mutant wrap-descriptor-behind-unwrapped src/protocol/rdma_sender.cc \
    '} else if (link == nullptr && behind(buffer.seq, comm_.sequences().peek(buffer.tag))) {' \
    '} else if (link == nullptr && buffer.seq < comm_.sequences().peek(buffer.tag)) {' \
    wrap_test 'Wrap.*' NNF_TEST_PROVIDER=tcp+rdma
  mutant wrap-eager-behind-unwrapped src/protocol/rdma_eager_receiver.cc \
    'if (!behind(header.seq, comm_.sequences().peek(header.tag))) return;' \
    'if (header.seq >= comm_.sequences().peek(header.tag)) return;' \
    wrap_test 'Wrap.*' NNF_TEST_PROVIDER=tcp+rdma

  # The control channel: every receive of its ring is posted again, whatever landed in it.
  mutant control-failed-receive-not-reposted src/core/control_channel.cc \
    'if (error == FI_ECANCELED) return;  // the device is closing' 'if (true) return;' \
    control_channel_test '*' NNF_TEST_PROVIDER=tcp
  mutant control-malformed-message-not-reposted src/core/control_channel.cc \
    'NNF_WARN("device %d: dropped a control message: %s", device_.index(), reason.c_str());' \
    'NNF_WARN("device %d: dropped a control message: %s", device_.index(), reason.c_str()); return;' \
    control_channel_test '*' NNF_TEST_PROVIDER=shm

  # Striping: shares rounded up to 4 KiB from the halves rounded up (8 MiB + 1 rounded down
  # leaves a third share for a rail that does not exist).
  mutant stripe-share-rounded-down src/protocol/rdma_striping.cc \
    'uint64_t share = (total + ways - 1) / ways;' 'uint64_t share = total / ways;' \
    multirail_test 'Multirail.*Striped*:Multirail.Shares*' NNF_TEST_PROVIDER=efa+rdma+2rails

  # The close answer's write counts per rail: too low and a receiver's close returns before the
  # last writes landed (held back by the EFA-rules provider); too high and it waits for writes
  # that never come.
  mutant close-inline-writes-uncounted src/protocol/rdma_striping.cc \
    '      close_.countWrite(rail);' '      (void)rail;' \
    close_test 'Close/CloseCounts.*' NNF_TEST_PROVIDER=efa+rdma
  mutant close-leader-writes-uncounted src/protocol/rdma_sender.cc \
    'if (op.rail < kMaxRails) close_.countWrite(op.rail);' \
    'if (op.rail > 0 && op.rail < kMaxRails) close_.countWrite(op.rail);' \
    close_test 'Close/CloseCounts.*' NNF_TEST_PROVIDER=efa+rdma
  mutant close-limit-write-counted-twice src/protocol/rdma_eager_sender.cc \
    'if (!write.inFlight && !write.queued) close_.countWrite(write.rail);' \
    'close_.countWrite(write.rail);' \
    close_test 'Close/CloseCounts.*' NNF_TEST_PROVIDER=efa+rdma

  # What a device hands its provider must go although NCCL never calls that device again (the
  # keeper progresses it): a refused send's notice held behind a full queue, an injected last
  # send that tcp or efa keep until the next progress. Else the receive waits for ever.
  mutant handover-unkept src/core/device.h \
    '    if (!keeperArmed_ && keeper_ != nullptr) {' '    if (false) {' \
    rdma_protocol_test '*ARefusedSendsNotice*' -
  mutant handover-unkept-inject src/core/device.h \
    '    if (!keeperArmed_ && keeper_ != nullptr) {' '    if (false) {' \
    keeper_test '*' -
  # The same on libfabric's real efa provider (the software EFA device): sends the receiver had no
  # buffer for come back as RNR and go again only from the sender's progress.
  mutant handover-unkept-softefa src/core/device.h \
    '    if (!keeperArmed_ && keeper_ != nullptr) {' '    if (false) {' \
    quiet_sender_test 'QuietSender.*' NNF_TEST_PROVIDER=softefa

  # Rail health (issue 27): a rail whose path broke is left out of later messages' choices,
  # striped and whole on one rail, on the stand-in and on the real efa provider.
  mutant rail-down-kept src/core/rail_health.h \
    '    if (mask == 0) mask = (1u << rails) - 1;' '    mask = (1u << rails) - 1;' \
    failover_test 'Failover.ARailWhosePathBreaks*' NNF_TEST_PROVIDER=efa+rdma+2rails
  mutant rail-down-kept-softefa src/core/rail_health.h \
    '    if (mask == 0) mask = (1u << rails) - 1;' '    mask = (1u << rails) - 1;' \
    failover_test 'Failover.ARailWhosePathBreaks*' NNF_TEST_PROVIDER=softefa+rdma+2rails
  # Rail recovery (issue 27, docs/failover.md step 3): a share in doubt is written again when
  # the receiver forgot it; the receiver forgets what landed of it and ignores late originals
  # (the fake fabric's failed rail lands one failed write in four all the same).
  mutant recovery-share-dropped src/protocol/rdma_send_recovery.cc \
    'resolveRail(*op.request, op.rail, answer.resend != 0,' 'resolveRail(*op.request, op.rail, false,' \
    rdma_failover_test,failover_test 'RdmaFailover*:Failover.ARailWhosePathBreaks*' \
    NNF_TEST_PROVIDER=softefa+rdma+2rails
  mutant recovery-late-original-counted src/protocol/rdma_slot_progress.h \
    '    if ((buffer.ignoredRails >> rail & 1u) != 0) return SegmentOutcome::kPending;' '' \
    rdma_failover_test 'RdmaFailover*' -
  mutant recovery-landed-kept src/protocol/rdma_slot_progress.h \
    '    buffer.seen = static_cast<uint8_t>(buffer.seen - buffer.seenOn[rail]);' '' \
    rdma_failover_test 'RdmaFailover*' -
  mutant recovery-ended-buffer-reset src/protocol/rdma_recv_recovery.cc \
    'described.seq == static_cast<uint16_t>(query.seq) &&' '' \
    rdma_failover_test 'RdmaFailover*' -
  # Rail rejoin (issue 27): a down rail is probed and carries data again once a probe succeeds.
  mutant rail-never-probed src/core/rail_health.cc \
    '  if (allUp()) return -1;' '  return -1;' \
    rdma_failover_test 'RdmaFailover*ComesBack*' -
  mutant rail-probe-error-ignored src/core/device.cc \
    '  if (error != 0) {' '  if (false) {' \
    rdma_failover_test 'RdmaFailover*ComesBack*' -
  mutant keeper-turns-for-down-rail src/core/progress_keeper.cc \
    '      intervalNs_ = active_ ? std::clamp(probeWaitNs, kTurnNs, kLongestProbeWaitNs) : kTurnNs;' \
    '      intervalNs_ = kTurnNs;' \
    keeper_test 'KeeperWithADownRail*' -
  # Eager messages on a failed rail (issue 27): asked about by entry and generation, written
  # again, and taken once however often they land.
  mutant eager-recovery-off src/protocol/rdma_send_recovery.cc \
    '  if (!takeOver(op, imm, error)) {' '  if (eager || !takeOver(op, imm, error)) {' \
    rdma_failover_test 'RdmaFailover*' -
  mutant eager-recovery-off-softefa src/protocol/rdma_send_recovery.cc \
    '  if (!takeOver(op, imm, error)) {' '  if (eager || !takeOver(op, imm, error)) {' \
    failover_test 'Failover.EagerMessagesInFlight*' NNF_TEST_PROVIDER=softefa+rdma+2rails
  mutant recovery-second-failure-fails src/protocol/rdma_send_recovery.cc \
    '  if (others == 0) return false;' \
    '  if (others == 0 || op.segment.resent != 0) return false;' \
    rdma_failover_test 'RdmaFailover*WrittenAgain*' -
  # Two shares of a striped message on one failed rail (one written again onto it): asked about
  # only once neither moves there, both go again, and never onto a rail the buffer ignores.
  mutant recovery-asked-while-beside-moves src/protocol/rdma_send_recovery.cc \
    'if (!eager && !isVoidWrite && otherShareMovingOn(op)) {' 'if (false) {' \
    rdma_failover_test 'RdmaFailover*TwoShares*' -
  mutant recovery-ended-beside-not-again src/protocol/rdma_send_recovery.cc \
    '      ++request.remaining;' '      continue;' \
    rdma_failover_test 'RdmaFailover*TwoShares*' -
  mutant recovery-again-on-ignored-rail src/protocol/rdma_send_recovery.cc \
    '  uint32_t avoid = ignored | 1u << rail;' '  uint32_t avoid = 1u << rail;' \
    rdma_failover_test 'RdmaFailover*ItsBufferIgnores*' -
  # A refused send's notice in doubt outlives its request's report to NCCL.
  mutant recovery-notice-forgotten src/protocol/rdma_send_recovery.cc \
    '    if (op.segment.notice != 0) continue;' '' \
    rdma_failover_test 'RdmaFailover*RefusedSends*' -
  mutant recovery-rail-bytes-kept src/protocol/rdma_slot_progress.h \
    '    buffer.bytes -= buffer.bytesOn[rail];' '' \
    rdma_failover_test 'RdmaFailover*TwoShares*' -
  mutant eager-second-landing-taken src/protocol/rdma_eager_receiver.cc \
    '  if (generation >= 0 && !inbox_.expects(entry, static_cast<uint32_t>(generation))) {' \
    '  if (false) {' \
    rdma_failover_test 'RdmaFailover*EagerMessages*' -
  # A small message injected on a comm of several rails: efa reports a failed inject with no
  # context, and the message would be lost unseen (its send done, its receive waiting forever).
  mutant rail-inject-multirail src/protocol/rdma_striping.cc \
    'hostBuffer && comm_.rails() == 1;' 'hostBuffer;' \
    failover_test 'Failover.ARailWhosePathBreaks*' NNF_TEST_PROVIDER=softefa+rdma+2rails
  # Writes efa queued behind a handshake that failed (a NIC down before its first write to the
  # peer) are never completed: without taking them back the message waits for ever.
  mutant stranded-kept src/core/device_endpoint.cc \
    '    releaseStranded(rail);' '    (void)rail;' \
    failover_test 'Failover.ANicDownBeforeItsFirstWrite*' NNF_TEST_PROVIDER=softefa+rdma+2rails

  # The leader's failure: the comm's control messages and own writes (descriptors, credits, the
  # eager limit) that fail with the leader go again on a rail up, and the sender takes a
  # descriptor group once.
  mutant leader-control-not-sent-again src/core/control_channel.cc \
    'if (rail < 0) return false;' 'return false;' \
    failover_test 'Failover.*Leader*' NNF_TEST_PROVIDER=softefa+rdma+2rails
  mutant leader-own-writes-not-written-again src/protocol/rdma_own_write.h \
    'if (rail < 0) return false;' \
    'return false;' failover_test 'Failover.*Leader*' NNF_TEST_PROVIDER=softefa+rdma+2rails
  mutant leader-own-writes-on-the-leader src/protocol/rdma_own_write.h \
    'device.railHealth().firstUp(comm.rails(), comm.pathsDown()) : 0;' '0 : 0;' \
    failover_test 'Failover.*Leader*' NNF_TEST_PROVIDER=efa+rdma+2rails
  mutant leader-descriptors-taken-twice src/protocol/rdma_sender.cc \
    'static_cast<int32_t>(group[0].generation - generations_[slot]) <= 0' 'false' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.TheLeader*' -
  mutant leader-notice-on-the-leader src/protocol/rdma_striping.cc \
    'size_t rail = ownWriteRail(comm_.device(), comm_);' 'size_t rail = 0;' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.TheLeader*:*ARefusedSend*' -
  mutant leader-notice-not-asked-about src/core/data_comm.cc \
    '(request->state == Request::State::kActive || op.segment.notice != 0)' \
    'request->state == Request::State::kActive' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.ARefusedSend*' -

  # Paths (core/path_health.h): a peer's broken NIC takes one path down, not our rail; a comm
  # leaves its broken paths out; a path rejoins by its probe; our own NIC's failure still takes
  # the rail down.
  mutant path-blames-the-rail src/core/device_paths.cc \
    'if (pathProbe_ == nullptr || peer == selfAddresses_[rail] || peer == FI_ADDR_UNSPEC) {' \
    'if (true) {' failover_test 'Failover.APeers*' NNF_TEST_PROVIDER=efa+rdma+2rails
  mutant path-left-in-stripes src/protocol/rdma_striping.cc \
    'carrying(rails, carrying, comm_.pathsDown());' 'carrying(rails, carrying, 0);' \
    failover_test 'Failover.APeers*' NNF_TEST_PROVIDER=efa+rdma+4rails
  mutant path-never-rejoins src/core/device_paths.cc \
    '  paths_.probeSucceeded(index, nowNs());' '  paths_.probeFailed(index, nowNs()); return;' \
    failover_test 'Failover.APeersBrokenNic*' NNF_TEST_PROVIDER=efa+rdma+2rails
  mutant path-endpoint-error-blames-the-rail src/core/device_endpoint.cc \
    'if (pathProbe_ != nullptr && railHealth_.state(rail) == RailState::kUp) {' 'if (false) {' \
    failover_test 'Failover.APeersNicDownBeforeOurFirstWrite*' NNF_TEST_PROVIDER=softefa+rdma+2rails
  mutant flush-not-read-again src/core/data_comm.cc \
    'op.request != nullptr && readAgain(op, error)) return;' 'op.request != nullptr && false) return;' \
    failover_test 'Failover.AFlushOnALeader*' NNF_TEST_PROVIDER=efa+rdma+2rails
  mutant path-nic-failure-unseen src/core/device_paths.cc \
    'const bool ourNicFailed = error != 0;' 'const bool ourNicFailed = false;' \
    failover_test 'Failover.ARailWhosePathBreaks*' NNF_TEST_PROVIDER=efa+rdma+2rails

  # Silent paths (core/silence_watch.h): writes that neither complete nor fail are found by the
  # comm's other rails completing (or a ping's), taken back and sent again where the provider can
  # forget them (the fake fabric; efa from libfabric 2.3), or left to fail where it cannot (2.1:
  # the functional test); a slow peer (every rail stuck) is not judged.
  mutant silence-not-taken-back src/core/device_silence.cc \
    'size_t count = takeBack(rail, peers, "stuck on a silent path");' 'size_t count = 0;' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.APeersNicGoingSilent*' -
  mutant silence-no-witness-ping src/core/device_silence.cc \
    'if (found.unwitnessed != 0) comm.pingForWitness(found.unwitnessed);' '' \
    failover_test 'Failover.APeersSilent*' NNF_TEST_PROVIDER=efa+rdma+2rails
  mutant silence-ping-on-the-stuck-rail src/core/data_comm.cc \
    'uint32_t rails = device().railHealth().usable(rails_, pathsDown_) & ~stuck;' \
    'uint32_t rails = device().railHealth().usable(rails_, pathsDown_);' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.APingThatWitnesses*' -
  mutant silence-leader-left-out src/core/device_silence.cc \
    'for (size_t r = 0; r < comm.rails(); ++r) {' 'for (size_t r = 1; r < comm.rails(); ++r) {' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.APeersLeaderNicGoingSilent*' -
  mutant silence-receive-comms-left-out src/core/device_silence.cc \
    'if (kind != Comm::Kind::kSend && kind != Comm::Kind::kRecv) continue;' \
    'if (kind != Comm::Kind::kSend) continue;' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.APeersLeaderNicGoingSilent*' -
  mutant silence-path-left-up src/core/device_silence.cc \
    '  pathBroke(rail, peer, what);  // as a failed write' '  // left up' \
    failover_test 'Failover.APeersSilentNic*' NNF_TEST_PROVIDER=softefa+rdma+2rails
  mutant silence-judges-a-slow-peer src/core/silence_watch.cc \
    'if ((stuck & bit) == 0 || (stuck & ~bit) != 0) continue;' 'if ((stuck & bit) == 0) continue;' \
    silence_watch_test 'SilenceWatch.*' -
  # A comm that connects while the leader is down (issue 27): the connect message goes on a rail
  # up toward the listener, again on another after its rail broke, and is taken once.
  mutant connect-on-the-leader-only src/core/send_comm.cc \
    'sendSetUp(setUpRail(0), connectSend_' 'sendSetUp(0, connectSend_' \
    failover_test 'Failover.ACommConnectsWhileTheLeaderIsKnownDown' NNF_TEST_PROVIDER=efa+rdma+2rails
  mutant connect-not-sent-again src/core/send_comm.cc \
    'if (device().controlChannel().sendAgain(op, control(), *this, error)) return;' '' \
    failover_test 'Failover.ACommWhoseConnectMeets*' NNF_TEST_PROVIDER=softefa+rdma+2rails
  mutant connect-taken-twice src/core/listen_comm.cc \
    'if (std::find(connected_.begin(), connected_.end(), connector) != connected_.end()) return;' '' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.ASetUpMessage*' -
  mutant stranded-leader-kept src/core/device_endpoint.cc \
    'if (railCount_ > 1 && RailHealth::isPathFailure(error)) {' \
    'if (railCount_ > 1 && rail != 0 && RailHealth::isPathFailure(error)) {' \
    failover_test 'Failover.*FirstMessage' NNF_TEST_PROVIDER=softefa+rdma+2rails
  mutant stranded-own-writes-kept src/core/device_endpoint.cc \
    '    comm.forEachOwnInFlightOn(rail, strand);
  });
  if (peers.empty()) return;' '  });
  if (peers.empty()) return;' \
    failover_test 'Failover.*FirstMessage' NNF_TEST_PROVIDER=softefa+rdma+2rails
  # Rail recovery of voids: one that failed on a broken rail is asked about and written again,
  # and its late original is ignored (a slot waiting for it forever, or ended twice).
  mutant void-failed-not-asked src/protocol/rdma_sender.cc \
    'recovery_.onVoidFailed(op, error)) {' 'false) {' \
    rdma_failover_test 'RdmaFailoverOverFakeFabric.*' -
  mutant void-late-original-taken src/protocol/rdma_slot_progress.h \
    'if ((buffer.ignoredVoidRails >> rail & 1u) != 0) return true;' '' \
    rdma_states_test 'RdmaBufferStates.*' -
  mutant wire-handle-rails src/core/wire.cc \
    'size_t{handle.rails} * handle.addressLength > kMaxAddressLength) {' 'false) {' \
    wire_test 'ListenHandle.*' -
}

# ---------------------------------------------------------------------------------------------

names=() files=() originals=() replacements=() targets=() filters=() envs=()
mutant() {
  local name=$1
  if (($# != 7)); then
    echo "mutants: '$name' has $# fields, expected 7" >&2
    exit 2
  fi
  if ((${#selected[@]} > 0)); then
    local prefix keep=0
    for prefix in "${selected[@]}"; do [[ $name == "$prefix"* ]] && keep=1; done
    ((keep)) || return 0
  fi
  names+=("$1") files+=("$2") originals+=("$3") replacements+=("$4") targets+=("$5")
  filters+=("$6") envs+=("$7")
}
selected=("$@")
table
if ((${#names[@]} == 0)); then
  echo "mutants: no mutant matches: $*" >&2
  exit 2
fi
if [[ ! -f $build/build.ninja && ! -f $build/Makefile ]]; then
  echo "mutants: $build is not a configured build folder (set MUTANTS_BUILD_DIR)" >&2
  exit 2
fi

# Number of times fixed string $2 occurs in text $1.
occurrences() {
  local text=$1 needle=$2 count=0
  while [[ $text == *"$needle"* ]]; do
    text=${text#*"$needle"}
    count=$((count + 1))
  done
  echo "$count"
}

# Every original must be found exactly once before anything is changed: a table that no
# longer matches the source is an error, never a silently skipped mutant.
stale=0
for i in "${!names[@]}"; do
  if [[ ! -f ${files[i]} ]]; then
    echo "mutants: ${names[i]}: ${files[i]} does not exist" >&2
    stale=1
    continue
  fi
  IFS= read -r -d '' content <"${files[i]}" || true
  n=$(occurrences "$content" "${originals[i]}")
  if ((n != 1)); then
    if ((n == 0)); then
      echo "mutants: ${names[i]}: pattern not found in ${files[i]}: ${originals[i]}" >&2
    else
      echo "mutants: ${names[i]}: pattern found $n times in ${files[i]} (must be once): ${originals[i]}" >&2
    fi
    stale=1
  fi
done
((stale == 0)) || exit 2

backup_dir=$(mktemp -d)
current_file=""
restore() {
  if [[ -n $current_file ]]; then
    # A plain copy (new mtime), so that the next build recompiles the restored source.
    cp "$backup_dir/original" "$current_file"
    current_file=""
  fi
}
cleanup() {
  restore
  rm -rf "$backup_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log_dir=$build/mutants
mkdir -p "$log_dir"

build_targets() {  # $1: comma-separated targets; $2: log file
  local list
  IFS=, read -r -a list <<<"$1"
  nice cmake --build "$build" --target "${list[@]}" >"$2" 2>&1
}

# Runs every target of a mutant with its filter and environment, appending to the log; returns
# 0 when all pass.
run_tests() {  # $1 targets, $2 filter, $3 env, $4 log file
  local list target status=0 env=()
  IFS=, read -r -a list <<<"$1"
  [[ $3 == - ]] || read -r -a env <<<"$3"
  for target in "${list[@]}"; do
    local binary=$build/tests/$target
    if [[ ! -x $binary ]]; then
      echo "mutants: test binary $binary not found" >&2
      exit 2
    fi
    echo "== $target --gtest_filter=$2 ${env[*]}" >>"$4"
    # In a subshell, so that the shell's own note of a crash ("Aborted") goes to the log too.
    if ! (env "${env[@]}" timeout "$timeout_s" nice "$binary" --gtest_filter="$2") >>"$4" 2>&1; then
      status=1
    fi
    if tail -n 200 "$4" | grep -q "Running 0 tests"; then
      echo "mutants: the filter '$2' selects no test of $target" >&2
      exit 2
    fi
  done
  return $status
}

start_all=$SECONDS
if [[ ${MUTANTS_BASELINE:-1} != 0 ]]; then
  # The unmodified tree must pass what each mutant runs, or a "killed" means nothing.
  declare -A seen=()
  for i in "${!names[@]}"; do
    key="${targets[i]}|${filters[i]}|${envs[i]}"
    [[ -z ${seen[$key]:-} ]] || continue
    seen[$key]=1
    log=$log_dir/baseline-$i.log
    if ! build_targets "${targets[i]}" "$log"; then
      echo "mutants: the unmodified tree does not build ${targets[i]} (see $log)" >&2
      exit 2
    fi
    if ! run_tests "${targets[i]}" "${filters[i]}" "${envs[i]}" "$log"; then
      echo "mutants: the unmodified tree fails ${targets[i]} --gtest_filter=${filters[i]} (see $log)" >&2
      exit 2
    fi
  done
  echo "baseline: every test passes on the unmodified tree ($((SECONDS - start_all)) s)"
fi

results=()
survivors=0
for i in "${!names[@]}"; do
  name=${names[i]} file=${files[i]}
  log=$log_dir/$name.log
  started=$SECONDS
  cp "$file" "$backup_dir/original"
  current_file=$file
  IFS= read -r -d '' content <"$file" || true
  printf '%s' "${content/"${originals[i]}"/"${replacements[i]}"}" >"$file"
  if ! build_targets "${targets[i]}" "$log"; then
    restore
    echo "mutants: $name does not compile (see $log); fix its replacement" >&2
    exit 2
  fi
  if run_tests "${targets[i]}" "${filters[i]}" "${envs[i]}" "$log"; then
    verdict=SURVIVED
    survivors=$((survivors + 1))
  else
    verdict=KILLED
  fi
  restore
  line=$(printf '%-9s %-36s %4d s  %s' "$verdict" "$name" $((SECONDS - started)) "$log")
  echo "$line"
  results+=("$line")
done

# Leave the build folder as it was: rebuild every target from the restored sources.
all_targets=$(printf '%s\n' "${targets[@]}" | tr , '\n' | sort -u | paste -sd, -)
if ! build_targets "$all_targets" "$log_dir/restore.log"; then
  echo "mutants: rebuilding from the restored sources failed (see $log_dir/restore.log)" >&2
  exit 2
fi

echo
echo "mutants: ${#names[@]} run, $((${#names[@]} - survivors)) killed, $survivors survived ($((SECONDS - start_all)) s)"
printf '%s\n' "${results[@]}" | grep '^SURVIVED' || true
((survivors == 0))
