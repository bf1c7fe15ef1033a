// NIC links that go down in the middle of a run and come back (provider.cc lists the controls).
// In a process's view NIC n is down while one of its controls says so:
//   NNF_EFA_RULES_FAIL_AFTER_OPS=n:K[:K2]  after K transmit operations taken on NIC n, until
//                                          K2 more were posted on any NIC (0 or absent: for good);
//                                          the post after the K-th (K2-th) finds the change
//   NNF_EFA_RULES_FAIL_AFTER_MS=n:T[:T2]   T ms after the first transmit operation on NIC n,
//                                          for T2 ms
//   NNF_EFA_RULES_FAIL_FILE=path           while the file names n
// What a down link does is decided at the initiator, as on EFA, where a write to a dead NIC
// lands nowhere and its initiator learns so from its completion: a transmit operation (send,
// write, read, inject) posted on a down NIC, or to an endpoint on a NIC its own process sees
// down, is taken and completes with an error (ECONNABORTED, prov_errno 4124, where the endpoint
// had reached that peer before; else EHOSTUNREACH, 15); an inject's error has a NULL context. A
// transmit the base took before the link went down and whose completion is read while it is
// down completes with the same error, its bytes possibly landed (the acknowledgement lost): the
// target may count it and see it again when it is sent once more. Receives stay posted.
//
// A NIC the file names as silent ("s1") swallows instead: a transmit posted on it or to it is
// taken and never completes, and one taken before whose completion is read while silent never
// completes either (its bytes possibly landed), as a NIC reset or a dead link that the device
// reports nothing about; until its initiator removes the target's address (fi_av_remove), after
// which nothing of it ever comes, or until SRD's retries run out
// (NNF_EFA_RULES_SILENT_GIVE_UP_MS, 1 s): then it fails as above (ECONNABORTED, 4124).
//
// Each process publishes the NICs it sees down in <shared directory>/health-<pid> (a 32-bit
// mask in a page mapped shared, its silent ones in the next word), so that its peers' initiators
// fail what they address to it;
// the target of an operation is known where endpoints publish their NIC (several NICs).
#include "link.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "post.h"

namespace efa_rules {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr auto kFilePoll = std::chrono::milliseconds(1);
constexpr auto kPeerRetry = std::chrono::milliseconds(10);
constexpr size_t kHealthBytes = 4096;

const char* envValue(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

LinkSchedule scheduleFrom(const char* name) {
  LinkSchedule schedule;
  const char* text = envValue(name);
  if (text != nullptr && !parseLinkSchedule(text, &schedule)) {
    std::fprintf(stderr, "efa-rules: %s: ignoring \"%s\" (expected n:K[:K2])\n", name, text);
  }
  return schedule;
}

std::string healthPath(long pid) {
  return sharedDirectory() + "/health-" + std::to_string(pid);
}

// Where an operation goes: the process and NIC of its target endpoint (pid 0: unknown).
struct Target {
  long pid = 0;
  int nic = -1;
};

// A transmit the base took, by the context its completion will carry.
struct Inflight {
  int nic;  // the initiator's
  Target target;
  Av* av;  // where it went (a silent link withholds its completion under that entry)
  fi_addr_t dest;
};

class Links {
 public:
  static Links& get() {
    static Links* links = new Links();  // never destroyed: completions may be read at exit
    return *links;
  }

  bool controlled() const { return controls_.any(); }
  // Whether operations are checked at all: links of ours may go down, or peers' may (their
  // NICs are known only where endpoints publish them).
  bool active() const { return active_; }

  // This process's down NICs, the time and file schedules brought up to date.
  uint32_t mask() {
    if (!controlled()) return 0;
    std::lock_guard<std::mutex> guard(mutex_);
    auto now = SteadyClock::now();
    const LinkSchedule& ms = controls_.ms;
    if (ms.nic >= 0 && msStarted_ && !msDone_) {
      if (!msDown_ && now >= msFirst_ + std::chrono::milliseconds(ms.after)) {
        msDown_ = true;
        msDownAt_ = now;
      }
      if (msDown_ && ms.restoreAfter > 0 &&
          now >= msDownAt_ + std::chrono::milliseconds(ms.restoreAfter)) {
        msDown_ = false;
        msDone_ = true;
      }
    }
    if (!controls_.file.empty() && now >= nextFileRead_) {
      nextFileRead_ = now + kFilePoll;
      // The file speaks for every process; FILE.<pid>, where it exists, for that one alone (a
      // peer's NIC that breaks while ours work).
      fileMask_ = 0;
      silentMask_ = 0;
      for (const std::string& path :
           {controls_.file, controls_.file + "." + std::to_string(getpid())}) {
        std::ifstream in(path);
        std::stringstream text;
        if (in) text << in.rdbuf();
        fileMask_ |= parseDownNics(text.str());
        silentMask_ |= parseSilentNics(text.str());
      }
    }
    return publishLocked();
  }

  // A transmit post is being checked: the operation schedule moves here only, once K (or K2)
  // were counted, so that no operation is failed by the transition its own count brings.
  void advanceOperations() {
    if (!controlled()) return;
    std::lock_guard<std::mutex> guard(mutex_);
    const LinkSchedule& ops = controls_.ops;
    if (ops.nic < 0 || opsDone_) return;
    if (!opsDown_ && opsCount_ >= ops.after) opsDown_ = true;
    if (opsDown_ && ops.restoreAfter > 0 && opsSinceDown_ >= ops.restoreAfter) {
      opsDown_ = false;
      opsDone_ = true;
    }
  }

  // One transmit operation on `nic` was taken by the base or failed by a down link (a post the
  // base answered -FI_EAGAIN counts when it is taken).
  void counted(int nic) {
    if (!controlled()) return;
    std::lock_guard<std::mutex> guard(mutex_);
    const LinkSchedule& ops = controls_.ops;
    if (ops.nic >= 0 && !opsDone_) {
      if (opsDown_)
        ++opsSinceDown_;
      else if (nic == ops.nic)
        ++opsCount_;
    }
    if (controls_.ms.nic == nic && !msStarted_) {
      msStarted_ = true;
      msFirst_ = SteadyClock::now();
    }
  }

  // This process's silent NICs (mask() brings them up to date).
  uint32_t silentMask() {
    mask();
    std::lock_guard<std::mutex> guard(mutex_);
    return silentMask_;
  }
  // The NICs process `pid` sees down (`silent`: silent); 0 for a process that publishes nothing.
  uint32_t peerMask(long pid, bool silent = false) {
    if (pid == getpid()) return silent ? silentMask() : mask();
    std::lock_guard<std::mutex> guard(mutex_);
    PeerHealth& peer = peers_[pid];
    if (peer.word == nullptr && SteadyClock::now() >= peer.retryAt) {
      peer.retryAt = SteadyClock::now() + kPeerRetry;
      int fd = open(healthPath(pid).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        void* page = mmap(nullptr, kHealthBytes, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (page != MAP_FAILED) peer.word = static_cast<const std::atomic<uint32_t>*>(page);
      }
    }
    return peer.word != nullptr ? peer.word[silent ? 1 : 0].load(std::memory_order_acquire) : 0;
  }

  // The target of `dest` as `ep` sees it, learnt once per address vector entry; an unknown one
  // is asked again every few milliseconds (its endpoint may publish after our first post).
  Target targetOf(Ep* ep, fi_addr_t dest) {
    if (ep->av == nullptr || dest == FI_ADDR_UNSPEC || dest == FI_ADDR_NOTAVAIL) return Target{};
    auto now = SteadyClock::now();
    {
      std::lock_guard<std::mutex> guard(mutex_);
      auto found = targets_.find({ep->av, dest});
      if (found != targets_.end() && (found->second.target.pid != 0 || now < found->second.retryAt))
        return found->second.target;
    }
    Target target;
    char name[256];
    size_t len = sizeof(name);
    if (fi_av_lookup(ep->av->base, dest, name, &len) == 0 && len <= sizeof(name)) {
      int nic = -1;
      long pid = 0;
      if (publishedEndpoint(canonicalAddress(name, len), &nic, &pid)) target = Target{pid, nic};
    }
    std::lock_guard<std::mutex> guard(mutex_);
    targets_[{ep->av, dest}] = KnownTarget{target, now + kPeerRetry};
    return target;
  }

  // Whether `ep` had an operation to `dest` taken before (EFA: the peer's handshake came).
  bool reached(Ep* ep, fi_addr_t dest) {
    std::lock_guard<std::mutex> guard(mutex_);
    return reached_.count({ep, dest}) != 0;
  }
  void markReached(Ep* ep, fi_addr_t dest) {
    std::lock_guard<std::mutex> guard(mutex_);
    reached_.insert({ep, dest});
  }

  void track(Cq* cq, void* context, const Inflight& inflight) {
    std::lock_guard<std::mutex> guard(mutex_);
    inflight_[{cq, context}] = inflight;
  }
  bool untrack(Cq* cq, void* context, Inflight* out) {
    std::lock_guard<std::mutex> guard(mutex_);
    auto found = inflight_.find({cq, context});
    if (found == inflight_.end()) return false;
    *out = found->second;
    inflight_.erase(found);
    return true;
  }

  // Transmits a silent link swallowed (posted, or taken by the base with their completion read
  // while silent), by the address vector entry they went to: never completed, until the entry
  // is removed (forgotten then, as efa forgets what it holds for a removed peer).
  // The completion it owes comes as an error once SRD's retries ran out
  // (NNF_EFA_RULES_SILENT_GIVE_UP_MS, giveUp).
  void withhold(Av* av, fi_addr_t dest, Cq* cq, void* context, uint64_t flags, uint64_t data) {
    std::lock_guard<std::mutex> guard(mutex_);
    withheld_.push_back(Withheld{av, dest, cq, context, flags, data, SteadyClock::now()});
    ++withheldCount;
  }
  void forgetWithheld(Av* av, fi_addr_t dest) {
    std::lock_guard<std::mutex> guard(mutex_);
    for (size_t i = 0; i < withheld_.size();) {
      if (withheld_[i].av != av || withheld_[i].dest != dest) {
        ++i;
        continue;
      }
      withheld_[i] = withheld_.back();
      withheld_.pop_back();
      ++forgottenCount;
    }
  }
  // What `cq` owes and was withheld longer than the give-up time fails now (cq's lock held).
  void giveUp(Cq* cq) {
    std::lock_guard<std::mutex> guard(mutex_);
    auto now = SteadyClock::now();
    for (size_t i = 0; i < withheld_.size();) {
      const Withheld& held = withheld_[i];
      if (held.cq != cq || now < held.since + giveUpAfter_) {
        ++i;
        continue;
      }
      fi_cq_err_entry error{};
      error.op_context = held.context;
      error.flags = held.flags;
      error.data = held.data;
      error.err = FI_ECONNABORTED;
      error.prov_errno = kEfaEstablishedRecvUnresp;
      cq->synthetic.push_back(error);
      ++failed;
      withheld_[i] = withheld_.back();
      withheld_.pop_back();
    }
  }

  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> withheldCount{0};
  std::atomic<uint64_t> forgottenCount{0};

 private:
  struct KnownTarget {
    Target target;
    SteadyClock::time_point retryAt;
  };
  struct PeerHealth {
    const std::atomic<uint32_t>* word = nullptr;
    SteadyClock::time_point retryAt{};
  };

  Links() {
    controls_.ops = scheduleFrom("NNF_EFA_RULES_FAIL_AFTER_OPS");
    controls_.ms = scheduleFrom("NNF_EFA_RULES_FAIL_AFTER_MS");
    if (const char* file = envValue("NNF_EFA_RULES_FAIL_FILE")) controls_.file = file;
    if (const char* ms = envValue("NNF_EFA_RULES_SILENT_GIVE_UP_MS"))
      giveUpAfter_ = std::chrono::milliseconds(std::strtoull(ms, nullptr, 10));
    active_ = controls_.any() || loadConfig().nics > 1;
    // A file left by an earlier process with our pid must not speak for us.
    unlink(healthPath(getpid()).c_str());
    if (controlled()) removeDeadFiles();
    openOwnFile();
  }

  // Forked test children leave with _exit: each process that makes a health file removes those
  // of processes that are gone, so that they do not pile up run after run.
  static void removeDeadFiles() {
    DIR* dir = opendir(sharedDirectory().c_str());
    if (dir == nullptr) return;
    while (dirent* entry = readdir(dir)) {
      if (std::strncmp(entry->d_name, "health-", 7) != 0) continue;
      long pid = std::atol(entry->d_name + 7);
      if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        unlink((sharedDirectory() + "/" + entry->d_name).c_str());
    }
    closedir(dir);
  }

  // This process's health file, made afresh; again in a child forked after it was made (the
  // mapping it inherited is its parent's file).
  void openOwnFile() {
    ownerPid_ = getpid();
    own_ = nullptr;
    if (!controlled()) return;
    std::string path = healthPath(ownerPid_);
    mkdir(sharedDirectory().c_str(), 0700);
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0 && ftruncate(fd, kHealthBytes) == 0) {
      void* page = mmap(nullptr, kHealthBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (page != MAP_FAILED) own_ = static_cast<std::atomic<uint32_t>*>(page);
    }
    if (fd >= 0) close(fd);
    published_ = 0;
    publishedSilent_ = 0;
  }

  uint32_t publishLocked() {
    if (ownerPid_ != getpid()) openOwnFile();
    publish(silentMask_, &publishedSilent_, 1, "silent", "no longer silent");
    uint32_t mask = fileMask_;
    if (opsDown_) mask |= 1u << controls_.ops.nic;
    if (msDown_) mask |= 1u << controls_.ms.nic;
    publish(mask, &published_, 0, "down", "up again");
    return mask;
  }

  // Word `word` of the health page becomes `mask` (from *published), one stderr line a NIC
  // that changed.
  void publish(uint32_t mask, uint32_t* published, int word, const char* set, const char* cleared) {
    if (mask == *published) return;
    for (int nic = 0; nic < kMaxNics; ++nic) {
      uint32_t bit = 1u << nic;
      if ((mask ^ *published) & bit) {
        std::fprintf(stderr, "efa-rules: pid %d: NIC %d link %s\n", static_cast<int>(getpid()), nic,
                     (mask & bit) ? set : cleared);
      }
    }
    *published = mask;
    if (own_ != nullptr) own_[word].store(mask, std::memory_order_release);
  }

  LinkControls controls_;
  bool active_ = false;
  std::mutex mutex_;
  uint64_t opsCount_ = 0, opsSinceDown_ = 0;
  bool opsDown_ = false, opsDone_ = false;
  bool msStarted_ = false, msDown_ = false, msDone_ = false;
  SteadyClock::time_point msFirst_{}, msDownAt_{}, nextFileRead_{};
  uint32_t fileMask_ = 0;
  uint32_t silentMask_ = 0;  // the file's silent NICs ("s1")
  uint32_t published_ = 0;
  uint32_t publishedSilent_ = 0;
  std::atomic<uint32_t>* own_ = nullptr;
  long ownerPid_ = 0;
  std::map<long, PeerHealth> peers_;
  std::map<std::pair<Av*, fi_addr_t>, KnownTarget> targets_;
  std::set<std::pair<Ep*, fi_addr_t>> reached_;
  std::map<std::pair<Cq*, void*>, Inflight> inflight_;
  struct Withheld {
    Av* av;
    fi_addr_t dest;
    Cq* cq;  // where its completion is owed (null: none, an inject)
    void* context;
    uint64_t flags;
    uint64_t data;
    SteadyClock::time_point since;
  };
  std::vector<Withheld> withheld_;
  SteadyClock::duration giveUpAfter_ = std::chrono::milliseconds(1000);
};

bool isTransmit(const Post& post) {
  return !post.recv;
}

// Whether the link between our NIC `nic` and `target` is down, as this process sees it.
bool linkDown(Links& links, int nic, const Target& target) {
  if (links.mask() & (1u << nic)) return true;
  return target.pid != 0 && target.nic >= 0 && (links.peerMask(target.pid) & (1u << target.nic));
}

// Whether that link is silent: what goes over it neither arrives nor fails.
bool linkSilent(Links& links, int nic, const Target& target) {
  if (links.silentMask() & (1u << nic)) return true;
  return target.pid != 0 && target.nic >= 0 &&
         (links.peerMask(target.pid, true) & (1u << target.nic));
}

}  // namespace

bool parseLinkSchedule(const char* text, LinkSchedule* out) {
  if (text == nullptr) return false;
  unsigned long long values[3] = {0, 0, 0};
  int count = 0;
  const char* p = text;
  while (count < 3) {
    if (*p < '0' || *p > '9') return false;
    char* end = nullptr;
    values[count++] = std::strtoull(p, &end, 10);
    p = end;
    if (*p == '\0') break;
    if (*p != ':') return false;
    ++p;
  }
  if (*p != '\0' || count < 2 || values[0] >= static_cast<unsigned long long>(kMaxNics)) {
    return false;
  }
  out->nic = static_cast<int>(values[0]);
  out->after = values[1];
  out->restoreAfter = values[2];
  return true;
}

namespace {

// The NICs a control file names, plain ("1") or silent ("s1").
uint32_t parseNics(const std::string& text, bool silent) {
  uint32_t mask = 0;
  std::string item;
  bool itemSilent = false;
  char before = ' ';
  auto take = [&] {
    if (!item.empty() && itemSilent == silent && item.size() <= 2 &&
        std::atoi(item.c_str()) < kMaxNics)
      mask |= 1u << std::atoi(item.c_str());
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

}  // namespace

uint32_t parseDownNics(const std::string& text) {
  return parseNics(text, false);
}

uint32_t parseSilentNics(const std::string& text) {
  return parseNics(text, true);
}

bool linksControlled() {
  return Links::get().controlled();
}

void refreshLinks() {
  Links& links = Links::get();
  if (links.controlled()) links.mask();
}

bool failedByLink(Ep* ep, const Post& post) {
  Links& links = Links::get();
  if (!links.active() || !isTransmit(post)) return false;
  Target target = links.targetOf(ep, post.addr);
  links.advanceOperations();
  if (!linkDown(links, ep->domain->nic, target)) {
    if (!linkSilent(links, ep->domain->nic, target)) return false;
    links.counted(ep->domain->nic);
    links.withhold(ep->av, post.addr, ep->txCq, post.inject ? nullptr : post.context,
                   completionFlags(post), post.withData ? post.data : 0);  // taken, not heard of
    return true;
  }
  links.counted(ep->domain->nic);  // taken ones count when the base took them (noteTransmit)
  ++links.failed;
  bool reached = links.reached(ep, post.addr);
  fi_cq_err_entry entry{};
  entry.op_context = post.inject ? nullptr : post.context;  // EFA: an inject has no context
  entry.flags = completionFlags(post);
  entry.data = post.withData ? post.data : 0;
  entry.err = reached ? FI_ECONNABORTED : FI_EHOSTUNREACH;
  entry.prov_errno = reached ? kEfaEstablishedRecvUnresp : kEfaUnreachRemote;
  if (ep->txCq != nullptr) {
    std::lock_guard<std::mutex> guard(ep->txCq->mutex);
    ep->txCq->synthetic.push_back(entry);
  }
  return true;
}

void noteTransmit(Ep* ep, const Post& post) {
  Links& links = Links::get();
  if (!links.active() || !isTransmit(post)) return;
  links.counted(ep->domain->nic);
  links.markReached(ep, post.addr);
  if (post.inject || post.context == nullptr || ep->txCq == nullptr) return;
  links.track(ep->txCq, post.context,
              Inflight{ep->domain->nic, links.targetOf(ep, post.addr), ep->av, post.addr});
}

bool linkFailsCompletion(Cq* cq, const fi_cq_tagged_entry& entry) {
  Links& links = Links::get();
  if (!links.active() || (entry.flags & (FI_SEND | FI_WRITE | FI_READ)) == 0 ||
      (entry.flags & (FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ)) != 0) {
    return false;
  }
  Inflight inflight{};
  if (!links.untrack(cq, entry.op_context, &inflight)) return false;
  if (!linkDown(links, inflight.nic, inflight.target)) {
    if (!linkSilent(links, inflight.nic, inflight.target)) return false;
    // Landed, perhaps; its completion is withheld.
    links.withhold(inflight.av, inflight.dest, cq, entry.op_context, entry.flags, entry.data);
    return true;
  }
  ++links.failed;
  fi_cq_err_entry error{};
  error.op_context = entry.op_context;
  error.flags = entry.flags;
  error.err = FI_ECONNABORTED;
  error.prov_errno = kEfaEstablishedRecvUnresp;
  cq->synthetic.push_back(error);
  return true;
}

const char* linkErrorText(int provErrno) {
  switch (provErrno) {
    case kEfaEstablishedRecvUnresp:
      return "efa-rules: link down: Unresponsive receiver (connection previously established)";
    case kEfaUnreachRemote:
      return "efa-rules: link down: Unreachable remote (never received a response)";
    default:
      return nullptr;
  }
}

uint32_t linkDownMask() {
  return Links::get().mask();
}

uint64_t linkFailedOperations() {
  return Links::get().failed.load();
}

void giveUpWithheld(Cq* cq) {
  Links& links = Links::get();
  if (links.active()) links.giveUp(cq);
}

void forgetWithheld(Av* av, fi_addr_t dest) {
  Links& links = Links::get();
  if (links.active()) links.forgetWithheld(av, dest);
}

uint64_t linkWithheldOperations() {
  return Links::get().withheldCount.load();
}

uint64_t linkForgottenOperations() {
  return Links::get().forgottenCount.load();
}

}  // namespace efa_rules
