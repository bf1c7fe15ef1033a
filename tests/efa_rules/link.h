// NIC links that go down in the middle of a run and come back (link.cc): the controls
// NNF_EFA_RULES_FAIL_AFTER_OPS, NNF_EFA_RULES_FAIL_AFTER_MS and NNF_EFA_RULES_FAIL_FILE, and
// what a NIC whose link is down does to the operations posted on it or addressed to it. See
// provider.cc for the semantics and docs/efa.md for the real provider's.
#pragma once

#include <cstdint>
#include <string>

#include "efa_rules.h"

namespace efa_rules {

struct Post;

// "n:K[:K2]": NIC n goes down after K of something and comes back after K2 more (0: never).
struct LinkSchedule {
  int nic = -1;  // -1: no schedule
  uint64_t after = 0;
  uint64_t restoreAfter = 0;
};

struct LinkControls {
  LinkSchedule ops;  // NNF_EFA_RULES_FAIL_AFTER_OPS: counted in transmit operations
  LinkSchedule ms;   // NNF_EFA_RULES_FAIL_AFTER_MS: counted in milliseconds
  std::string file;  // NNF_EFA_RULES_FAIL_FILE: the NICs named in it are down (in FILE.<pid>:
                     // down for that process only)
  bool any() const { return ops.nic >= 0 || ms.nic >= 0 || !file.empty(); }
};

// Parses "n:K[:K2]" (n < kMaxNics); false, leaving *out alone, when the text is not that.
bool parseLinkSchedule(const char* text, LinkSchedule* out);
// The NICs a control file names: numbers below kMaxNics separated by commas or white space;
// anything else in it is ignored. An empty or missing file names none.
uint32_t parseDownNics(const std::string& text);
// The NICs it names silent: a number right after an 's' ("s1").
uint32_t parseSilentNics(const std::string& text);

// Whether this process has any link control (read once, at the first call).
bool linksControlled();
// Brings this process's view of its links up to date (the file read at most every millisecond)
// and publishes it: called where completions are read, so that a process that only waits for
// data still sees a link mended or broken, as a NIC's link does not wait for its host to send.
void refreshLinks();

// EFA's errors for an operation that meets a down link (efa_errno.h in libfabric 2.1): the
// device's "unresponsive remote" promoted by the provider where the peer's handshake had come,
// and "unreachable remote" where the peer never answered.
constexpr int kEfaEstablishedRecvUnresp = 4124;  // FI_EFA_ERR_ESTABLISHED_RECV_UNRESP
constexpr int kEfaUnreachRemote = 15;            // EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE

// A transmit post (send, write, read, inject) on `ep` toward `dest`, checked before it goes to
// the base: true, with the error completion queued (or, for an inject, written with a NULL
// context as EFA writes it), when the endpoint's NIC or the target's is down. Every transmit
// post that reaches this check counts for the operation schedule.
bool failedByLink(Ep* ep, const Post& post);
// A transmit post the base took: remembered (context, target) so that a completion read while
// either link is down turns into an error (linkFailsCompletion).
void noteTransmit(Ep* ep, const Post& post);
// A base completion drained from `cq` (its lock held): true when it is a transmit of ours that
// meets a down link, with its error entry queued on cq->synthetic instead.
bool linkFailsCompletion(Cq* cq, const fi_cq_tagged_entry& entry);
// fi_cq_strerror's text for the errors above; nullptr for any other prov_errno.
const char* linkErrorText(int provErrno);

// For tests (getopt): the NICs down in this process's view, and the operations failed so far.
uint32_t linkDownMask();
uint64_t linkFailedOperations();
// Transmits a silent link withheld so far, and of those, the ones forgotten by fi_av_remove.
uint64_t linkWithheldOperations();
uint64_t linkForgottenOperations();
// fi_av_remove of `dest` on `av`: what a silent link withheld for it is forgotten.
void forgetWithheld(Av* av, fi_addr_t dest);
// What `cq` owes that a silent link withheld longer than SRD's retries last fails now (its
// error queued; cq's lock held).
void giveUpWithheld(Cq* cq);

}  // namespace efa_rules
