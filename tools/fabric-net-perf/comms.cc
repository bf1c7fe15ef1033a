#include "comms.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace nnf::perf {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTag = 0x7c;
// A side none of whose pending comms moved for this long gives up: the peer is dead or stuck.
constexpr int kStallSeconds = 60;
constexpr uint8_t kSentinel = 0x5c;  // what the receive buffer holds before the data lands

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

long residentBytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

int openFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  closedir(dir);
  return count - 1;  // not the descriptor that read the directory
}

// Byte k of the message on comm c. The first 8 bytes are an odd multiple of c + 1 (one to one
// on 64 bits), so a message delivered to another comm cannot pass; the rest depend on c and k.
uint8_t commByte(long c, size_t k) {
  if (k < 8) {
    uint64_t id = (static_cast<uint64_t>(c) + 1) * 0x9e3779b97f4a7c15ull;
    return static_cast<uint8_t>(id >> (8 * k));
  }
  return static_cast<uint8_t>(c * 29 + k * 7 + (k >> 9) + 1);
}

class CommsRun {
 public:
  CommsRun(PluginEngine& plugin, Bootstrap& boot, const Options& opts)
      : net_(plugin.net()),
        dev_(plugin.dev()),
        props_(plugin.properties()),
        boot_(boot),
        n_(opts.comms),
        bytes_(opts.minBytes),
        stride_(std::max<size_t>(64, (opts.minBytes + 63) & ~size_t{63})),
        receiver_(boot.rank() == 0),
        progress_(boot.rank() == 0 && !opts.quiet && isatty(STDERR_FILENO)) {}
  ~CommsRun() { std::free(buffer_); }
  CommsRun(const CommsRun&) = delete;
  CommsRun& operator=(const CommsRun&) = delete;

  bool run(std::vector<CommsSide>* sides);
  const std::string& error() const { return error_; }

 private:
  bool fail(const std::string& text) {
    if (error_.empty()) error_ = text;
    return false;
  }
  bool check(const char* call, abi::Result rc, long c);
  bool moving(bool progressed, Clock::time_point* last, const char* what, long done);
  void phase(const char* what);
  char* handle(long c) { return &handles_[static_cast<size_t>(c) * abi::kHandleMaxSize]; }
  char* slot(long c) { return buffer_ + static_cast<size_t>(c) * stride_; }

  bool prepare();
  // Calls openOne(c) on every comm c not open yet until all are (connect and accept return
  // success with a NULL comm until the connection is up); false on an error or a stall.
  template <typename OpenOne>
  bool openAll(const char* what, OpenOne&& openOne);
  bool listenAndAccept(CommsSide* me);
  bool connectAll(CommsSide* me);
  bool step(long c, bool* moved);
  void verify(long c, int size);
  bool moveData(CommsSide* me);
  bool closeAll(CommsSide* me);

  const abi::NetV8& net_;
  const int dev_;
  const abi::PropertiesV8& props_;
  Bootstrap& boot_;
  const long n_;
  const size_t bytes_, stride_;
  const bool receiver_, progress_;
  char* buffer_ = nullptr;  // n_ slots of stride_ bytes, one per comm
  void* mh_ = nullptr;      // its one registration, on the first comm
  std::vector<char> handles_;
  std::vector<void*> listens_, comms_, requests_;
  std::vector<char> finished_;
  long completed_ = 0;
  long wrong_ = 0;
  std::string firstWrong_;
  std::string error_;
};

bool CommsRun::check(const char* call, abi::Result rc, long c) {
  if (rc == abi::kSuccess) return true;
  return fail(pluginCallError(
      std::string(call) + " on comm " + std::to_string(c) + " of " + std::to_string(n_), rc));
}

// Called after each sweep over the pending comms: false once none has moved for kStallSeconds.
bool CommsRun::moving(bool progressed, Clock::time_point* last, const char* what, long done) {
  if (progressed) {
    *last = Clock::now();
    return true;
  }
  if (Clock::now() - *last < std::chrono::seconds(kStallSeconds)) {
    // Two ranks on a shared machine: let the peer have the CPU it needs to answer.
    sched_yield();
    return true;
  }
  return fail(std::string("no progress for ") + std::to_string(kStallSeconds) + " s while " + what +
              " (" + std::to_string(done) + " of " + std::to_string(n_) +
              " done; is the peer alive?)");
}

void CommsRun::phase(const char* what) {
  if (progress_) std::fprintf(stderr, "\rcomms: %s, %ld comms          ", what, n_);
}

// Everything a side needs is allocated and touched before the first measurement of memory, so
// that what grows after it is the plugin's.
bool CommsRun::prepare() {
  if (props_.maxComms > 0 && n_ > props_.maxComms)
    return fail(std::to_string(n_) + " comms requested, the plugin allows maxComms " +
                std::to_string(props_.maxComms));
  if (props_.regIsGlobal == 0)
    return fail(
        "the plugin does not report regIsGlobal; this mode registers one buffer for every "
        "comm");
  size_t total = stride_ * static_cast<size_t>(n_);
  void* memory = nullptr;
  if (posix_memalign(&memory, 4096, total) != 0)
    return fail("out of memory for " + std::to_string(total) + " bytes of buffers");
  buffer_ = static_cast<char*>(memory);
  std::memset(buffer_, kSentinel, total);
  if (!receiver_)
    for (long c = 0; c < n_; ++c)
      for (size_t k = 0; k < bytes_; ++k) slot(c)[k] = commByte(c, k);
  handles_.assign(static_cast<size_t>(n_) * abi::kHandleMaxSize, 0);
  listens_.assign(n_, nullptr);
  comms_.assign(n_, nullptr);
  requests_.assign(n_, nullptr);
  finished_.assign(n_, 0);
  return true;
}

template <typename OpenOne>
bool CommsRun::openAll(const char* what, OpenOne&& openOne) {
  long open = 0;
  auto last = Clock::now();
  while (open < n_) {
    bool progressed = false;
    for (long c = 0; c < n_; ++c) {
      if (comms_[c] != nullptr) continue;
      if (!openOne(c)) return false;
      if (comms_[c] == nullptr) continue;
      ++open;
      progressed = true;
    }
    if (!moving(progressed, &last, what, open)) return false;
  }
  return true;
}

bool CommsRun::listenAndAccept(CommsSide* me) {
  phase("listening and accepting");
  me->fdsBefore = openFds();
  me->rssBefore = residentBytes();
  auto t0 = Clock::now();
  for (long c = 0; c < n_; ++c) {
    if (!check("listen", net_.listen(dev_, handle(c), &listens_[c]), c)) return false;
    if (listens_[c] == nullptr)
      return fail("plugin listen returned success with a NULL listenComm");
  }
  int64_t count = n_;
  if (!boot_.send(1, &count, sizeof(count)) || !boot_.send(1, handles_.data(), handles_.size()))
    return fail(boot_.error());
  bool accepted = openAll("accepting", [&](long c) {
    abi::NetDeviceHandleV8* devHandle = nullptr;
    if (!check("accept", net_.accept(listens_[c], &comms_[c], &devHandle), c)) return false;
    if (comms_[c] == nullptr) return true;
    // As NCCL's proxy does: a listen comm is closed as soon as its connection is accepted.
    if (!check("closeListen", net_.closeListen(listens_[c]), c)) return false;
    listens_[c] = nullptr;
    return true;
  });
  if (!accepted) return false;
  me->setupSec = secondsSince(t0);
  return true;
}

bool CommsRun::connectAll(CommsSide* me) {
  int64_t count = 0;
  if (!boot_.recv(0, &count, sizeof(count))) return fail(boot_.error());
  if (count != n_)
    return fail("the receiver listens on " + std::to_string(count) + " comms, expected " +
                std::to_string(n_));
  if (!boot_.recv(0, handles_.data(), handles_.size())) return fail(boot_.error());
  me->fdsBefore = openFds();
  me->rssBefore = residentBytes();
  auto t0 = Clock::now();
  // Like NCCL, the same handle buffer is passed on every call: a plugin may keep state in it.
  bool connected = openAll("connecting", [&](long c) {
    abi::NetDeviceHandleV8* devHandle = nullptr;
    return check("connect", net_.connect(dev_, handle(c), &comms_[c], &devHandle), c);
  });
  if (!connected) return false;
  me->setupSec = secondsSince(t0);
  return true;
}

// One step on comm c: posts its message while the plugin has not taken it (a NULL request means
// "not now"), else tests it. *moved says whether anything happened.
bool CommsRun::step(long c, bool* moved) {
  *moved = false;
  if (finished_[c]) return true;
  if (requests_[c] == nullptr) {
    int size = static_cast<int>(bytes_);
    if (receiver_) {
      void* data[1] = {slot(c)};
      int sizes[1] = {size};
      int tags[1] = {kTag};
      void* mhs[1] = {mh_};
      if (!check("irecv", net_.irecv(comms_[c], 1, data, sizes, tags, mhs, &requests_[c]), c))
        return false;
    } else if (!check("isend", net_.isend(comms_[c], slot(c), size, kTag, mh_, &requests_[c]), c)) {
      return false;
    }
    *moved = requests_[c] != nullptr;
    return true;
  }
  int done = 0;
  int sizes[1] = {0};
  if (!check("test", net_.test(requests_[c], &done, sizes), c)) return false;
  if (!done) return true;
  requests_[c] = nullptr;
  finished_[c] = 1;
  ++completed_;
  *moved = true;
  if (receiver_) verify(c, sizes[0]);
  return true;
}

// Every byte of every message: they are small, and a mix-up between comms is what this mode
// would catch.
void CommsRun::verify(long c, int size) {
  char text[192] = "";
  if (size < 0 || static_cast<size_t>(size) != bytes_) {
    std::snprintf(text, sizeof(text), "comm %ld: received %d bytes, expected %zu", c, size, bytes_);
  } else {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(slot(c));
    for (size_t k = 0; k < bytes_; ++k) {
      if (p[k] == commByte(c, k)) continue;
      std::snprintf(text, sizeof(text),
                    "comm %ld (%zu bytes) at byte %zu: got 0x%02x, expected 0x%02x", c, bytes_, k,
                    p[k], commByte(c, k));
      break;
    }
  }
  if (text[0] == '\0') return;
  if (wrong_++ == 0) firstWrong_ = text;
}

bool CommsRun::moveData(CommsSide* me) {
  phase("one message on every comm");
  auto t0 = Clock::now();
  // One registration serves every comm (regIsGlobal), as NCCL registers a buffer once.
  if (!check("regMr", net_.regMr(comms_[0], buffer_, stride_ * n_, abi::kPtrHost, &mh_), 0))
    return false;
  char go = 'g';
  if (receiver_) {
    // One sweep posts every receive the plugin takes now (normally all of them) before the
    // sender starts; the loop below posts any it refused while testing the others.
    bool moved = false;
    for (long c = 0; c < n_; ++c)
      if (!step(c, &moved)) return false;
    if (!boot_.send(1, &go, 1)) return fail(boot_.error());
  } else if (!boot_.recv(0, &go, 1)) {
    return fail(boot_.error());
  }
  auto last = Clock::now();
  while (completed_ < n_) {
    bool progressed = false;
    for (long c = 0; c < n_; ++c) {
      bool moved = false;
      if (!step(c, &moved)) return false;
      progressed |= moved;
    }
    if (!moving(progressed, &last, receiver_ ? "receiving" : "sending", completed_)) return false;
  }
  me->dataSec = secondsSince(t0);
  me->rssOpen = residentBytes();
  me->fdsOpen = openFds();
  if (!check("deregMr", net_.deregMr(comms_[0], mh_), 0)) return false;
  mh_ = nullptr;
  return true;
}

bool CommsRun::closeAll(CommsSide* me) {
  phase("closing");
  auto t0 = Clock::now();
  for (long c = 0; c < n_; ++c) {
    abi::Result rc = receiver_ ? net_.closeRecv(comms_[c]) : net_.closeSend(comms_[c]);
    if (!check(receiver_ ? "closeRecv" : "closeSend", rc, c)) return false;
    comms_[c] = nullptr;
  }
  me->closeSec = secondsSince(t0);
  me->fdsClosed = openFds();
  return true;
}

bool CommsRun::run(std::vector<CommsSide>* sides) {
  CommsSide me;
  me.rank = boot_.rank();
  me.receiver = receiver_ ? 1 : 0;
  me.comms = n_;
  me.bytes = bytes_;
  if (!prepare()) return false;
  if (!(receiver_ ? listenAndAccept(&me) : connectAll(&me))) return false;
  // Each phase starts together on both sides.
  if (!boot_.barrier()) return fail(boot_.error());
  if (!moveData(&me)) return false;
  // Nobody closes before the peer has everything.
  if (!boot_.barrier()) return fail(boot_.error());
  if (!closeAll(&me)) return false;
  if (progress_) std::fprintf(stderr, "\r%60s\r", "");
  if (!receiver_) {
    if (!boot_.send(0, &me, sizeof(me))) return fail(boot_.error());
    return true;
  }
  CommsSide theirs;
  if (!boot_.recv(1, &theirs, sizeof(theirs))) return fail(boot_.error());
  sides->assign({me, theirs});
  if (wrong_ > 0)
    return fail(std::to_string(wrong_) + " of " + std::to_string(n_) +
                " messages wrong; first: " + firstWrong_);
  return true;
}

}  // namespace

bool runComms(PluginEngine& plugin, Bootstrap& boot, const Options& opts,
              std::vector<CommsSide>* sides, std::string* error) {
  if (boot.size() != 2) {
    *error = "comms: needs exactly two ranks";
    return false;
  }
  CommsRun run(plugin, boot, opts);
  if (run.run(sides)) return true;
  *error = run.error();
  return false;
}

}  // namespace nnf::perf
