// Links that go down in the middle of a run and come back (config.h: NNF_SOFT_EFA_FAIL_AFTER_OPS,
// _FAIL_AFTER_MS, _FAIL_FILE). A device's link is down while any process of the namespace says
// so (Registry::linkDownVotes: the processes share the NICs, as the ranks of a host do); the
// NICs that FILE.<pid> names are down for that process alone, as a peer host's NIC is for the
// processes that talk to it (LinkVoter::ownSlots: its own operations on them and those
// addressed to its queue pairs there fail, the others' do not). Then,
// as SRD reports a peer that stops answering, every send-queue operation of a queue pair on that
// device, or addressed to a queue pair on it, completes with "unresponsive remote" (13, which
// libfabric's efa provider turns into FI_EFA_ERR_ESTABLISHED_RECV_UNRESP where the peer's
// handshake had come) or, toward a device this one never had a completion from, "unreachable
// remote" (15). One not started lands nothing; one under way stops where it is (pieces of a
// write may have landed, without the target's completion); one whose target completion was
// delivered but whose own was not reports the error all the same (the acknowledgement lost):
// the target counted it. Receives stay posted; what was posted before the link came back and
// failed stays failed.
// A NIC that FILE.<pid> names silent ("s1") is silent for that process alone: an operation of its
// queue pairs there, or addressed to them, stops where it is (landed or not, its completion
// withheld) and neither moves nor fails until the NIC is no longer silent, or SRD's retries ran
// out (NNF_SOFT_EFA_SILENT_GIVE_UP_MS, 1 s), when it fails as unresponsive remote. (Should its
// peer have been removed from the initiator's address vector meanwhile, libfabric 2.1's efa
// crashes on that error: efa_rdm_cq_get_prov_errno reads the removed peer.)
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "soft_efa.h"

namespace nnf::softefa {
namespace {

constexpr uint64_t kFileReadIntervalNs = 1000000;  // the control file: at most every 1 ms

// This process's view, under proc.mutex.
struct LinkState {
  uint64_t opsOnNic = 0, opsSinceDown = 0;
  bool opsDown = false, opsDone = false;
  bool msStarted = false, msDown = false, msDone = false;
  uint64_t msFirstNs = 0, msDownAtNs = 0;
  uint32_t fileMask = 0;       // NICs (this process's device indexes) the control file names
  uint32_t ownFileMask = 0;    // those FILE.<pid> names: down for this process alone
  uint32_t ownSilentMask = 0;  // those FILE.<pid> names silent ("s1"), for this process alone
  uint64_t nextFileReadNs = 0;
  uint32_t voted = 0;           // registry device slots this process votes down
  uint32_t ownVoted = 0;        // registry device slots down for this process alone
  uint32_t ownSilentVoted = 0;  // registry device slots silent for this process alone
  // Per local device slot: the device slots a completion came back from (SRD: responsive).
  uint32_t reached[kMaxDevices] = {};
};

LinkState& state() {
  static LinkState* links = new LinkState();  // never destroyed: the device thread may run on
  return *links;
}

bool controlled() {
  const Config& cfg = config();
  return cfg.failAfterOps.nic >= 0 || cfg.failAfterMs.nic >= 0 || !cfg.failFile.empty();
}

// The NICs a control file names: plain ("1"), or silent ("s1") with `silent`.
uint32_t parseNics(const std::string& text, bool silent = false) {
  uint32_t mask = 0;
  std::string item;
  bool itemSilent = false;
  char before = ' ';
  auto take = [&] {
    if (!item.empty() && itemSilent == silent && item.size() <= 2 &&
        std::stoi(item) < static_cast<int>(kMaxDevices))
      mask |= 1u << std::stoi(item);
    item.clear();
  };
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      if (item.empty()) itemSilent = before == 's';
      item += c;
    } else {
      take();
    }
    before = c;
  }
  take();
  return mask;
}

// This process's votes become `slots` (from `voted`) and its own down slots `ownSlots`: the
// counts of the slots that changed, and its entry in the registry's voters (freed when it votes
// nothing down), under one lock so that dropVotesOfEndedProcesses never sees one without the
// other.
void vote(Registry& reg, uint32_t voted, uint32_t slots, uint32_t ownSlots,
          uint32_t ownSilentSlots) {
  const int32_t pid = static_cast<int32_t>(getpid());
  LockGuard guard(reg.lock);
  LinkVoter* entry = nullptr;
  for (LinkVoter& voter : reg.linkVoters) {
    if (voter.pid == pid) {
      entry = &voter;
      break;
    }
    if (voter.pid == 0 && entry == nullptr) entry = &voter;
  }
  if (entry == nullptr) {
    std::fprintf(stderr, "soft-efa %d: no room to record link votes\n", static_cast<int>(pid));
    std::abort();  // a test device: a vote that could linger would fail later tests unseen
  }
  const uint32_t own = ownSlots | ownSilentSlots;
  if (((entry->ownSlots | entry->ownSilentSlots) != 0) != (own != 0)) {
    if (own != 0)
      reg.ownDownVoters.fetch_add(1, std::memory_order_acq_rel);
    else
      reg.ownDownVoters.fetch_sub(1, std::memory_order_acq_rel);
  }
  entry->pid = (slots | own) != 0 ? pid : 0;
  entry->slots = slots;
  entry->ownSlots = ownSlots;
  entry->ownSilentSlots = ownSilentSlots;
  for (uint32_t slot = 0; slot < kMaxDevices; ++slot) {
    uint32_t bit = 1u << slot;
    if (!((slots ^ voted) & bit)) continue;
    bool down = (slots & bit) != 0;
    if (down)
      reg.linkDownVotes[slot].fetch_add(1, std::memory_order_acq_rel);
    else
      reg.linkDownVotes[slot].fetch_sub(1, std::memory_order_acq_rel);
    const Device* device = deviceBySlot(slot);
    std::fprintf(stderr, "soft-efa %d: %s link %s\n", static_cast<int>(pid),
                 device != nullptr ? device->ibv.name : "?", down ? "down" : "up again");
  }
}

// One stderr line for each device slot that `now` changed from `before` for this process alone.
void reportOwnChanges(uint32_t before, uint32_t now, const char* set, const char* cleared) {
  for (uint32_t slot = 0; slot < kMaxDevices; ++slot) {
    uint32_t bit = 1u << slot;
    if (!((before ^ now) & bit)) continue;
    const Device* device = deviceBySlot(slot);
    std::fprintf(stderr, "soft-efa %d: %s link %s for this process alone\n",
                 static_cast<int>(getpid()), device != nullptr ? device->ibv.name : "?",
                 (now & bit) ? set : cleared);
  }
}

// The schedules brought up to date; votes changed in the registry where the view changed. The
// operation schedule moves only at the check of a post (`posting`), once K (or K2) were counted:
// no operation is failed by the transition its own count brings.
void refresh(LinkState& links, bool posting) {
  if (!controlled()) return;
  const Config& cfg = config();
  uint64_t now = nowNs();
  const Config::LinkSchedule& ops = cfg.failAfterOps;
  if (posting && ops.nic >= 0 && !links.opsDone) {
    if (!links.opsDown && links.opsOnNic >= ops.after) links.opsDown = true;
    if (links.opsDown && ops.restoreAfter > 0 && links.opsSinceDown >= ops.restoreAfter) {
      links.opsDown = false;
      links.opsDone = true;
    }
  }
  const Config::LinkSchedule& ms = cfg.failAfterMs;
  if (ms.nic >= 0 && links.msStarted && !links.msDone) {
    if (!links.msDown && now >= links.msFirstNs + ms.after * 1000000) {
      links.msDown = true;
      links.msDownAtNs = now;
    }
    if (links.msDown && ms.restoreAfter > 0 &&
        now >= links.msDownAtNs + ms.restoreAfter * 1000000) {
      links.msDown = false;
      links.msDone = true;
    }
  }
  if (!cfg.failFile.empty() && now >= links.nextFileReadNs) {
    links.nextFileReadNs = now + kFileReadIntervalNs;
    auto read = [](const std::string& path) {
      std::ifstream in(path);
      std::stringstream text;
      if (in) text << in.rdbuf();
      return text.str();
    };
    links.fileMask = parseNics(read(cfg.failFile));
    const std::string own = read(cfg.failFile + "." + std::to_string(getpid()));
    links.ownFileMask = parseNics(own);
    links.ownSilentMask = parseNics(own, true);
  }
  uint32_t nics = links.fileMask;
  if (links.opsDown) nics |= 1u << cfg.failAfterOps.nic;
  if (links.msDown) nics |= 1u << ms.nic;
  uint32_t slots = 0, ownSlots = 0, ownSilent = 0;
  const std::vector<Device*>& list = devices();
  for (size_t n = 0; n < list.size(); ++n) {
    if (nics & (1u << n)) slots |= 1u << list[n]->slot;
    if (links.ownFileMask & (1u << n)) ownSlots |= 1u << list[n]->slot;
    if (links.ownSilentMask & (1u << n)) ownSilent |= 1u << list[n]->slot;
  }
  if (slots == links.voted && ownSlots == links.ownVoted && ownSilent == links.ownSilentVoted)
    return;
  reportOwnChanges(links.ownSilentVoted, ownSilent, "silent", "no longer silent");
  reportOwnChanges(links.ownVoted, ownSlots, "down", "up again");
  vote(registry(), links.voted, slots, ownSlots, ownSilent);
  links.voted = slots;
  links.ownVoted = ownSlots;
  links.ownSilentVoted = ownSilent;
}

}  // namespace

void dropVotesOfEndedProcesses() {
  Registry& reg = registry();
  LockGuard guard(reg.lock);
  for (LinkVoter& voter : reg.linkVoters) {
    if (voter.pid == 0 || processAlive(voter.pid)) continue;
    for (uint32_t slot = 0; slot < kMaxDevices; ++slot) {
      if ((voter.slots >> slot & 1u) != 0) {
        reg.linkDownVotes[slot].fetch_sub(1, std::memory_order_acq_rel);
      }
    }
    std::fprintf(stderr, "soft-efa %d: dropped the link votes of ended process %d\n",
                 static_cast<int>(getpid()), static_cast<int>(voter.pid));
    if ((voter.ownSlots | voter.ownSilentSlots) != 0)
      reg.ownDownVoters.fetch_sub(1, std::memory_order_acq_rel);
    voter = LinkVoter{0, 0, 0, 0};
  }
}

namespace {

bool slotDown(uint32_t slot) {
  return slot < kMaxDevices && registry().linkDownVotes[slot].load(std::memory_order_acquire) > 0;
}

// Whether queue pair `qpn` of device slot `slot` belongs to a process that sees that NIC down for
// itself alone (LinkVoter::ownSlots; `silent`: silent, ownSilentSlots).
bool ownerSeesDown(uint32_t slot, uint32_t qpn, bool silent = false) {
  Registry& reg = registry();
  if (slot >= kMaxDevices || qpn >= kMaxQp ||
      reg.ownDownVoters.load(std::memory_order_acquire) == 0) {
    return false;
  }
  LockGuard guard(reg.lock);
  int32_t owner = reg.qps[slot][qpn].pid;
  if (owner == 0) return false;
  for (const LinkVoter& voter : reg.linkVoters) {
    if (voter.pid == owner)
      return ((silent ? voter.ownSilentSlots : voter.ownSlots) >> slot & 1u) != 0;
  }
  return false;
}

}  // namespace

void refreshLinks() {
  refresh(state(), false);
}

void noteLinkPost(const Qp& qp) {
  if (!controlled()) return;
  LinkState& links = state();
  const Config& cfg = config();
  int nic = qp.ctx->device->index;
  const Config::LinkSchedule& ops = cfg.failAfterOps;
  if (ops.nic >= 0 && !links.opsDone) {
    if (links.opsDown)
      ++links.opsSinceDown;
    else if (nic == ops.nic)
      ++links.opsOnNic;
  }
  if (cfg.failAfterMs.nic == nic && !links.msStarted) {
    links.msStarted = true;
    links.msFirstNs = nowNs();
  }
}

uint32_t linkFailure(const Qp& qp, const SendWqe& wqe, bool posting) {
  if (wqe.ah == nullptr || wqe.ah->target < 0) return kOk;  // resolve() reports those
  LinkState& links = state();
  refresh(links, posting);
  uint32_t local = qp.ctx->device->slot;
  uint32_t target = static_cast<uint32_t>(wqe.ah->target);
  bool down = slotDown(local) || slotDown(target) || (links.ownVoted >> local & 1u) != 0 ||
              ownerSeesDown(target, wqe.remoteQpn);
  if (!down) return kOk;
  return (links.reached[local] & (1u << target)) ? kLocalUnresponsiveRemote
                                                 : kLocalUnreachableRemote;
}

bool linkSilent(const Qp& qp, const SendWqe& wqe) {
  if (wqe.ah == nullptr || wqe.ah->target < 0) return false;
  LinkState& links = state();
  refresh(links, false);
  uint32_t local = qp.ctx->device->slot;
  return (links.ownSilentVoted >> local & 1u) != 0 ||
         ownerSeesDown(static_cast<uint32_t>(wqe.ah->target), wqe.remoteQpn, true);
}

void noteLinkSuccess(const Qp& qp, const SendWqe& wqe) {
  if (wqe.status != kOk || wqe.ah == nullptr || wqe.ah->target < 0) return;
  state().reached[qp.ctx->device->slot] |= 1u << static_cast<uint32_t>(wqe.ah->target);
}

}  // namespace nnf::softefa
