// fabric-rma-probe: what a libfabric provider offers for a receiver-driven RMA protocol, as
// fi_getinfo states it and as two processes observe it (fi_writedata with remote CQ data, plain
// writes, tagged receives with ignore bits). Results for shm and tcp: docs/rma-providers.md.
//
// Usage: fabric-rma-probe [--provider NAME]... [--size BYTES]
//   default providers: shm, tcp, "tcp;ofi_rxm" (tcp runs over lo unless FI_TCP_IFACE is set)
//
// libfabric is touched only in forked children (a target and an initiator per provider, joined
// by a socketpair that carries addresses, keys and the test steps); the target prints.
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "raw_endpoint.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kCaps =
    FI_TAGGED | FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_READ | FI_REMOTE_READ;
constexpr uint64_t kOfferedMrModes =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
constexpr int kBurst = 16;     // writes in the burst test
constexpr int kWaitMs = 2000;  // how long a side waits for what it expects
constexpr int kGraceMs = 100;  // then for anything more
constexpr size_t kSmall = 64;  // receive buffers of the message tests
constexpr uint64_t kTagBase = 0xabcd000000000000ULL;
constexpr uint64_t kTagIgnore = 0x0000ffffffffffffULL;
constexpr int kFlood = 64;       // the unexpected-message test: messages sent
constexpr int kFloodPosted = 8;  // and receives posted for them
constexpr uint64_t kFloodTag = kTagBase | (uint64_t{1} << 20);

struct Flag {
  uint64_t bit;
  const char* name;
};

std::string flagText(uint64_t value, const std::vector<Flag>& names) {
  std::string text;
  for (const Flag& f : names) {
    if ((value & f.bit) == 0) continue;
    text += (text.empty() ? "" : "|") + std::string(f.name);
    value &= ~f.bit;
  }
  if (value != 0) {
    char rest[32];
    std::snprintf(rest, sizeof(rest), "0x%" PRIx64, value);
    text += (text.empty() ? "" : "|") + std::string(rest);
  }
  return text.empty() ? "0" : text;
}

std::string modeText(uint64_t mode) {
  return flagText(mode, {
                            {FI_CONTEXT, "CONTEXT"},
                            {FI_CONTEXT2, "CONTEXT2"},
                            {FI_MSG_PREFIX, "MSG_PREFIX"},
                            {FI_ASYNC_IOV, "ASYNC_IOV"},
                            {FI_RX_CQ_DATA, "RX_CQ_DATA"},
#ifdef FI_NOTIFY_FLAGS_ONLY
                            {FI_NOTIFY_FLAGS_ONLY, "NOTIFY_FLAGS_ONLY"},
#endif
#ifdef FI_RESTRICTED_COMP
                            {FI_RESTRICTED_COMP, "RESTRICTED_COMP"},
#endif
#ifdef FI_BUFFERED_RECV
                            {FI_BUFFERED_RECV, "BUFFERED_RECV"},
#endif
                        });
}

std::string mrModeText(uint64_t mode) {
  return flagText(mode, {
                            {FI_MR_LOCAL, "LOCAL"},
                            {FI_MR_RAW, "RAW"},
                            {FI_MR_VIRT_ADDR, "VIRT_ADDR"},
                            {FI_MR_ALLOCATED, "ALLOCATED"},
                            {FI_MR_PROV_KEY, "PROV_KEY"},
                            {FI_MR_MMU_NOTIFY, "MMU_NOTIFY"},
                            {FI_MR_RMA_EVENT, "RMA_EVENT"},
                            {FI_MR_ENDPOINT, "ENDPOINT"},
                            {FI_MR_HMEM, "HMEM"},
                        });
}

std::string orderText(uint64_t order) {
  return flagText(order, {
                             {FI_ORDER_RAR, "RAR"},
                             {FI_ORDER_RAW, "RAW"},
                             {FI_ORDER_RAS, "RAS"},
                             {FI_ORDER_WAR, "WAR"},
                             {FI_ORDER_WAW, "WAW"},
                             {FI_ORDER_WAS, "WAS"},
                             {FI_ORDER_SAR, "SAR"},
                             {FI_ORDER_SAW, "SAW"},
                             {FI_ORDER_SAS, "SAS"},
                             {FI_ORDER_RMA_RAR, "RMA_RAR"},
                             {FI_ORDER_RMA_RAW, "RMA_RAW"},
                             {FI_ORDER_RMA_WAR, "RMA_WAR"},
                             {FI_ORDER_RMA_WAW, "RMA_WAW"},
                             {FI_ORDER_ATOMIC_RAR, "ATOMIC_RAR"},
                             {FI_ORDER_ATOMIC_RAW, "ATOMIC_RAW"},
                             {FI_ORDER_ATOMIC_WAR, "ATOMIC_WAR"},
                             {FI_ORDER_ATOMIC_WAW, "ATOMIC_WAW"},
                         });
}

std::string cqFlagText(uint64_t flags) {
  return flagText(flags, {
                             {FI_MSG, "MSG"},
                             {FI_RMA, "RMA"},
                             {FI_TAGGED, "TAGGED"},
                             {FI_ATOMIC, "ATOMIC"},
                             {FI_SEND, "SEND"},
                             {FI_RECV, "RECV"},
                             {FI_READ, "READ"},
                             {FI_WRITE, "WRITE"},
                             {FI_REMOTE_READ, "REMOTE_READ"},
                             {FI_REMOTE_WRITE, "REMOTE_WRITE"},
                             {FI_REMOTE_CQ_DATA, "REMOTE_CQ_DATA"},
                             {FI_MULTI_RECV, "MULTI_RECV"},
                             {FI_MORE, "MORE"},
                             {FI_CLAIM, "CLAIM"},
                         });
}

// fi_tostr returns one buffer per thread: copy before the next call.
std::string tostr(const void* data, fi_type type) {
  return fi_tostr(data, type);
}

std::string hex(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%" PRIx64, value);
  return text;
}

std::string format(const char* fmt, ...) {
  char text[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  return text;
}

// Hints as the future rdma protocol would give them; mode and mr_mode vary per question.
fi_info* makeHints(const std::string& provider, uint64_t mode, uint64_t mrMode) {
  fi_info* hints = fi_allocinfo();
  hints->caps = kCaps;
  hints->mode = mode;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = static_cast<int>(mrMode);
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
  hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

// The entry for `provider` exactly ("tcp" must not pick "tcp;ofi_rxm"), else the first one.
fi_info* pick(fi_info* list, const std::string& provider) {
  for (fi_info* i = list; i != nullptr; i = i->next)
    if (provider == i->fabric_attr->prov_name) return i;
  return list;
}

int getinfo(const std::string& provider, uint64_t mode, uint64_t mrMode, uint64_t order,
            fi_info** out) {
  fi_info* hints = makeHints(provider, mode, mrMode);
  hints->tx_attr->msg_order = order;
  hints->rx_attr->msg_order = order;
  *out = nullptr;
  int rc =
      fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, out);
  fi_freeinfo(hints);
  if (rc != 0) *out = nullptr;
  return rc;
}

// What fi_getinfo states, printed by the target before the two-process tests.
void printAttributes(const std::string& provider) {
  uint32_t v = fi_version();
  std::printf("== provider \"%s\": libfabric %u.%u at run time (headers %d.%d)\n", provider.c_str(),
              FI_MAJOR(v), FI_MINOR(v), FI_MAJOR_VERSION, FI_MINOR_VERSION);
  const uint64_t plainMode = FI_CONTEXT | FI_CONTEXT2;
  fi_info* list = nullptr;
  int rc = getinfo(provider, plainMode, kOfferedMrModes, 0, &list);
  if (rc != 0) {
    std::printf("fi_getinfo (RDM, TAGGED|MSG|RMA|READ|WRITE|REMOTE_*, mode CONTEXT|CONTEXT2): %s\n",
                fi_strerror(-rc));
  } else {
    fi_info* i = pick(list, provider);
    std::string names;
    for (fi_info* j = list; j != nullptr; j = j->next)
      if (names.find(std::string("\"") + j->fabric_attr->prov_name + "\"") == std::string::npos)
        names += std::string(names.empty() ? "" : ", ") + "\"" + j->fabric_attr->prov_name + "\"";
    int entries = 0;
    for (fi_info* j = list; j != nullptr; j = j->next)
      entries += provider == j->fabric_attr->prov_name;
    std::printf(
        "fi_getinfo: ok; providers returned %s (%d entries for \"%s\"); using %s, domain %s, "
        "fabric %s\n",
        names.c_str(), entries, provider.c_str(), i->fabric_attr->prov_name, i->domain_attr->name,
        i->fabric_attr->name);
    std::printf("  caps: %s\n", tostr(&i->caps, FI_TYPE_CAPS).c_str());
    std::printf("  mode (offered CONTEXT|CONTEXT2): %s\n", modeText(i->mode).c_str());
    std::printf("  mr_mode (offered %s): %s\n", mrModeText(kOfferedMrModes).c_str(),
                mrModeText(static_cast<uint64_t>(i->domain_attr->mr_mode)).c_str());
    std::printf("  cq_data_size %zu, max_msg_size %zu, inject_size %zu, mr_key_size %zu\n",
                i->domain_attr->cq_data_size, i->ep_attr->max_msg_size, i->tx_attr->inject_size,
                i->domain_attr->mr_key_size);
    std::printf("  tx size %zu, rx size %zu, tx iov_limit %zu, rma_iov_limit %zu\n",
                i->tx_attr->size, i->rx_attr->size, i->tx_attr->iov_limit,
                i->tx_attr->rma_iov_limit);
    std::printf("  tx msg_order %s\n  rx msg_order %s\n", orderText(i->tx_attr->msg_order).c_str(),
                orderText(i->rx_attr->msg_order).c_str());
    std::printf("  max_order_waw_size %zu, max_order_raw_size %zu\n",
                i->ep_attr->max_order_waw_size, i->ep_attr->max_order_raw_size);
    std::printf("  progress data %s control %s, threading %s, tx op_flags %s\n",
                tostr(&i->domain_attr->data_progress, FI_TYPE_PROGRESS).c_str(),
                tostr(&i->domain_attr->control_progress, FI_TYPE_PROGRESS).c_str(),
                tostr(&i->domain_attr->threading, FI_TYPE_THREADING).c_str(),
                cqFlagText(i->tx_attr->op_flags).c_str());
  }
  fi_freeinfo(list);
  // The variants: with FI_RX_CQ_DATA offered, and with no context mode at all.
  struct Variant {
    const char* what;
    uint64_t mode, mrMode, order;
  };
  const Variant variants[] = {
      {"mode CONTEXT|CONTEXT2|RX_CQ_DATA offered", plainMode | FI_RX_CQ_DATA, kOfferedMrModes, 0},
      {"mode 0 offered", 0, kOfferedMrModes, 0},
      {"mr_mode LOCAL|VIRT_ADDR|ALLOCATED|PROV_KEY (no ENDPOINT)", plainMode,
       FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY, 0},
      {"mr_mode 0 offered", plainMode, 0, 0},
      {"msg_order RMA_WAW|RMA_RAW requested", plainMode, kOfferedMrModes,
       FI_ORDER_RMA_WAW | FI_ORDER_RMA_RAW},
      {"msg_order WAW|SAW|SAS requested", plainMode, kOfferedMrModes,
       FI_ORDER_WAW | FI_ORDER_SAW | FI_ORDER_SAS},
  };
  for (const Variant& variant : variants) {
    rc = getinfo(provider, variant.mode, variant.mrMode, variant.order, &list);
    if (rc != 0) {
      std::printf("  %s: fi_getinfo %s\n", variant.what, fi_strerror(-rc));
      continue;
    }
    fi_info* i = pick(list, provider);
    int entries = 0;
    for (fi_info* j = list; j != nullptr; j = j->next)
      entries += provider == j->fabric_attr->prov_name;
    std::printf("  %s: ok (%d entries), mode %s, mr_mode %s", variant.what, entries,
                modeText(i->mode).c_str(),
                mrModeText(static_cast<uint64_t>(i->domain_attr->mr_mode)).c_str());
    if (variant.order != 0)
      std::printf(", tx msg_order %s, rx msg_order %s", orderText(i->tx_attr->msg_order).c_str(),
                  orderText(i->rx_attr->msg_order).c_str());
    std::printf("\n");
    fi_freeinfo(list);
  }
}

// ---- control channel between the two processes --------------------------------------------

enum Op : uint32_t { kStart = 1, kReady, kReport, kDone, kEnd, kName, kRegion };

struct Msg {
  uint32_t op = 0;
  uint32_t test = 0;
  uint64_t v[4] = {0, 0, 0, 0};
  char text[256] = {0};
};

bool writeAll(int fd, const void* data, size_t bytes) {
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = write(fd, p, bytes);
    if (n <= 0) return false;
    p += n, bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool readAll(int fd, void* data, size_t bytes) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = read(fd, p, bytes);
    if (n <= 0) return false;
    p += n, bytes -= static_cast<size_t>(n);
  }
  return true;
}

// ---- one side ---------------------------------------------------------------------------------

struct Seen {
  fi_cq_tagged_entry e{};
  int err = 0;  // a completion error (positive errno) or 0
  std::string errText;
  int visible = -1;  // target writes: 1 when the written region was complete at read time
};

class Side {
 public:
  Side(std::string provider, int fd) : provider_(std::move(provider)), fd_(fd) {}
  ~Side() { close(); }

  bool open(std::string* error);
  void close();
  fid_mr* reg(void* buf, size_t bytes, uint64_t access, uint64_t key, std::string* error);
  void* desc(fid_mr* mr) const { return endpoint_.desc(mr); }
  bool virtAddr() const { return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0; }
  // Sends this side's endpoint name to the other process and inserts the one it sends back.
  bool exchangeNames(std::string* error);

  // Reads every completion there is now; calls check on each fresh success.
  void drain();
  // Progress until `want` completions are held or `ms` passed.
  void pollFor(size_t want, int ms);
  // Progress until a control message arrives (false after ms, or when the peer is gone).
  bool waitMsg(Msg* msg, int ms);
  bool send(const Msg& msg) { return writeAll(fd_, &msg, sizeof(msg)); }
  // Posts with retry on -FI_EAGAIN (progressing meanwhile).
  template <typename Post>
  ssize_t post(Post&& op);

  fid_ep* ep() const { return endpoint_.ep(); }
  fi_addr_t peer() const { return peer_; }
  std::vector<Seen> seen;
  std::function<int(const fi_cq_tagged_entry&)> check;

 private:
  std::string provider_;
  int fd_;
  fi_info* list_ = nullptr;
  fi_info* info_ = nullptr;
  nnf::tools::RawEndpoint endpoint_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
};

bool Side::open(std::string* error) {
  auto fail = [&](const char* what, int rc) {
    *error = format("%s: %s (%d)", what, fi_strerror(-rc), rc);
    return false;
  };
  int rc = getinfo(provider_, FI_CONTEXT | FI_CONTEXT2, kOfferedMrModes, 0, &list_);
  if (rc != 0) {
    // A provider that insists on FI_RX_CQ_DATA gets it: the tests then post receives for it.
    rc = getinfo(provider_, FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA, kOfferedMrModes, 0, &list_);
    if (rc != 0) return fail("fi_getinfo", rc);
  }
  info_ = pick(list_, provider_);
  const char* failed = nullptr;
  rc = endpoint_.open(info_, FI_CQ_FORMAT_TAGGED, 256, "nnf-rma-probe", &failed);
  return rc == 0 || fail(failed, rc);
}

void Side::close() {
  endpoint_.close();
  if (list_ != nullptr) fi_freeinfo(list_), list_ = nullptr;
}

fid_mr* Side::reg(void* buf, size_t bytes, uint64_t access, uint64_t key, std::string* error) {
  fid_mr* mr = nullptr;
  const char* failed = nullptr;
  int rc = endpoint_.regMr(buf, bytes, access, key, &mr, &failed);
  if (rc != 0) *error = format("%s: %s", failed, fi_strerror(-rc));
  return mr;
}

bool Side::exchangeNames(std::string* error) {
  std::string me;
  int rc = endpoint_.name(&me);
  if (rc != 0) return *error = format("fi_getname: %s", fi_strerror(-rc)), false;
  Msg mine, theirs;
  mine.op = kName;
  if (me.size() > sizeof(mine.text))
    return *error = format("an endpoint name of %zu bytes", me.size()), false;
  std::memcpy(mine.text, me.data(), me.size());
  mine.v[0] = me.size();
  if (!send(mine) || !readAll(fd_, &theirs, sizeof(theirs)) || theirs.op != kName)
    return *error = "the other process did not send its endpoint name", false;
  rc = endpoint_.insert(std::string(theirs.text, theirs.v[0]), &peer_);
  if (rc != 0) return *error = format("fi_av_insert: %s (%d)", fi_strerror(-rc), rc), false;
  return true;
}

void Side::drain() {
  fi_cq_tagged_entry entries[16];
  for (;;) {
    ssize_t n = fi_cq_read(endpoint_.cq(), entries, 16);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(endpoint_.cq(), &err, 0) < 0) return;
      Seen s;
      s.e.op_context = err.op_context;
      s.e.flags = err.flags;
      s.e.len = err.len;
      s.e.data = err.data;
      s.e.tag = err.tag;
      s.err = err.err;
      char text[256];
      const char* prov =
          fi_cq_strerror(endpoint_.cq(), err.prov_errno, err.err_data, text, sizeof(text));
      s.errText = std::string(fi_strerror(err.err)) + (prov ? std::string(" / ") + prov : "");
      seen.push_back(s);
      continue;
    }
    if (n <= 0) return;
    for (ssize_t k = 0; k < n; ++k) {
      Seen s;
      s.e = entries[k];
      // At once, before anything else runs: is the data there when its completion is?
      if (check) s.visible = check(entries[k]);
      seen.push_back(s);
    }
  }
}

void Side::pollFor(size_t want, int ms) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  do drain();
  while (seen.size() < want && Clock::now() < end);
}

bool Side::waitMsg(Msg* msg, int ms) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    drain();
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) return readAll(fd_, msg, sizeof(*msg));
    if (Clock::now() > end) return false;
  }
}

template <typename Post>
ssize_t Side::post(Post&& op) {
  auto end = Clock::now() + std::chrono::milliseconds(kWaitMs);
  for (;;) {
    ssize_t rc = op();
    if (rc != -FI_EAGAIN || Clock::now() > end) return rc;
    drain();
  }
}

// ---- the tests --------------------------------------------------------------------------------

enum Test : uint32_t {
  kWriteNoRecv = 1,  // writedata, nothing posted at the target
  kWriteZero,        // writedata of 0 bytes
  kWriteBurst,       // kBurst writedata to distinct regions: visibility and order
  kPlainWrite,       // fi_write then a 0-byte writedata: does the plain write complete remotely?
  kTaggedIgnore,     // fi_tsend to a fi_trecv with ignore bits: the tag reported
  kTaggedData,       // fi_tsenddata: flags and data at the receiver
  kFloodTest,        // kFlood fi_tinject to kFloodPosted receives, each reposted when it completes
  kWriteWithRecv,    // writedata while a receive is posted, then a send: is the receive taken?
  kTests
};

const char* testName(uint32_t t) {
  switch (t) {
    case kWriteNoRecv:
      return "writedata, no receive posted";
    case kWriteZero:
      return "writedata of 0 bytes";
    case kWriteBurst:
      return "16 writedata back to back";
    case kPlainWrite:
      return "fi_write, then a 0-byte writedata";
    case kTaggedIgnore:
      return "fi_tsend to fi_trecv with ignore bits";
    case kTaggedData:
      return "fi_tsenddata to fi_trecv";
    case kFloodTest:
      return "64 fi_tinject (32 B) to 8 posted fi_trecv, each reposted at its completion";
    case kWriteWithRecv:
      return "writedata with a receive posted, then fi_send";
  }
  return "?";
}

uint64_t dataOf(uint32_t test, int index) {
  return 0xd0000000ULL | (static_cast<uint64_t>(test) << 16) | static_cast<uint64_t>(index);
}

uint8_t patternByte(uint32_t test, int index, size_t k) {
  return static_cast<uint8_t>((test * 16 + index + 1) * 37 + k * 7 + (k >> 8));
}

// Region `index` of a test's writes: offset and length inside the target buffer.
void regionOf(uint32_t test, int index, size_t size, size_t* offset, size_t* bytes) {
  *offset = 0;
  *bytes = size;
  if (test == kWriteBurst) *bytes = size / kBurst, *offset = *bytes * index;
  if (test == kWriteZero) *bytes = 0;
  if (test == kPlainWrite) *bytes = index == 0 ? 4096 : 0;
  if (test == kWriteWithRecv) *bytes = 4096;
}

struct Remote {
  uint64_t addr = 0, key = 0, size = 0;
};

// Expected completions: at the target (best case) and at the initiator.
size_t targetWants(uint32_t t) {
  switch (t) {
    case kWriteBurst:
      return kBurst;
    case kWriteWithRecv:
      return 2;
    case kFloodTest:
      return kFlood;
    default:
      return 1;
  }
}
size_t initiatorWants(uint32_t t) {
  switch (t) {
    case kWriteBurst:
      return kBurst;
    case kPlainWrite:
    case kWriteWithRecv:
      return 2;
    case kFloodTest:
      return 0;  // injected: no completions
    default:
      return 1;
  }
}

int runInitiator(const std::string& provider, int fd, size_t size) {
  Side side(provider, fd);
  std::string error;
  if (!side.open(&error)) {
    std::fprintf(stderr, "initiator: %s\n", error.c_str());
    return 1;
  }
  if (!side.exchangeNames(&error)) {
    std::fprintf(stderr, "initiator: %s\n", error.c_str());
    return 1;
  }
  Msg region;
  if (!readAll(fd, &region, sizeof(region)) || region.op != kRegion) return 1;
  Remote remote{region.v[0], region.v[1], region.v[2]};

  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, size) != 0) return 1;
  auto* src = static_cast<uint8_t*>(mem);
  fid_mr* mr = side.reg(src, size, FI_WRITE | FI_READ | FI_SEND, 7, &error);
  if (mr == nullptr) {
    std::fprintf(stderr, "initiator: %s\n", error.c_str());
    return 1;
  }
  void* desc = side.desc(mr);
  std::vector<fi_context2> ctx(kBurst + 2);
  fid_ep* ep = side.ep();
  fi_addr_t peer = side.peer();

  for (uint32_t t = kWriteNoRecv; t < kTests; ++t) {
    // Lay down the source pattern of every region of this test.
    for (int index = 0; index < kBurst; ++index) {
      size_t offset, bytes;
      regionOf(t, index, size, &offset, &bytes);
      for (size_t k = 0; k < bytes; ++k) src[offset + k] = patternByte(t, index, k);
      if (t != kWriteBurst) break;
    }
    Msg start;
    start.op = kStart;
    start.test = t;
    Msg ready;
    if (!side.send(start) || !side.waitMsg(&ready, 10 * kWaitMs) || ready.op != kReady) return 1;
    side.seen.clear();
    auto write = [&](int index, uint64_t data, bool withData) {
      size_t offset, bytes;
      regionOf(t, index, size, &offset, &bytes);
      uint64_t addr = remote.addr + offset;
      return side.post([&] {
        return withData
                   ? fi_writedata(ep, src + offset, bytes, desc, data, peer, addr, remote.key,
                                  &ctx[index])
                   : fi_write(ep, src + offset, bytes, desc, peer, addr, remote.key, &ctx[index]);
      });
    };
    ssize_t rc = 0;
    switch (t) {
      case kWriteNoRecv:
      case kWriteZero:
        rc = write(0, dataOf(t, 0), true);
        break;
      case kWriteBurst:
        for (int index = 0; index < kBurst && rc == 0; ++index)
          rc = write(index, dataOf(t, index), true);
        break;
      case kPlainWrite:
        rc = write(0, 0, false);
        if (rc == 0) rc = write(1, dataOf(t, 1), true);
        break;
      case kTaggedIgnore:
        rc = side.post(
            [&] { return fi_tsend(ep, src, 16, desc, peer, kTagBase | 0xbeef, &ctx[0]); });
        break;
      case kTaggedData:
        rc = side.post([&] {
          return fi_tsenddata(ep, src, 16, desc, dataOf(t, 0), peer, kTagBase | 0x1234, &ctx[0]);
        });
        break;
      case kFloodTest:
        for (int i = 0; i < kFlood && rc == 0; ++i) {
          uint32_t message[8] = {static_cast<uint32_t>(i)};
          rc = side.post([&] {
            return fi_tinject(ep, message, sizeof(message), peer,
                              kFloodTag | static_cast<uint64_t>(i));
          });
        }
        break;
      case kWriteWithRecv:
        rc = write(0, dataOf(t, 0), true);
        if (rc == 0) rc = side.post([&] { return fi_send(ep, src, 8, desc, peer, &ctx[1]); });
        break;
    }
    side.pollFor(rc == 0 ? initiatorWants(t) : 0, kWaitMs);
    Msg report;
    report.op = kReport;
    report.test = t;
    report.v[0] = static_cast<uint64_t>(-rc);
    report.v[1] = side.seen.size();
    // Flags of each completion, runs of alike ones counted: "RMA|WRITE x16".
    std::string text, last;
    int run = 0;
    auto flush = [&] {
      if (run == 0) return;
      text += (text.empty() ? "" : "; ") + last + (run > 1 ? " x" + std::to_string(run) : "");
    };
    for (const Seen& s : side.seen) {
      std::string one = s.err ? "error " + s.errText : cqFlagText(s.e.flags);
      if (one != last) flush(), last = one, run = 0;
      ++run;
    }
    flush();
    std::snprintf(report.text, sizeof(report.text), "%s", text.c_str());
    Msg done;
    if (!side.send(report) || !side.waitMsg(&done, 10 * kWaitMs) || done.op != kDone) return 1;
  }
  Msg end;
  end.op = kEnd;
  side.send(end);
  Msg bye;
  side.waitMsg(&bye, kWaitMs);  // keep progressing until the target is through
  fi_close(&mr->fid);
  side.close();
  std::free(mem);
  return 0;
}

std::string contextText(void* ctx, const fi_context2* posted) {
  if (ctx == nullptr) return "NULL";
  if (ctx == posted) return "the posted receive's context";
  return format("%p (not ours)", ctx);
}

int runTarget(const std::string& provider, int fd, size_t size) {
  printAttributes(provider);
  Side side(provider, fd);
  std::string error;
  if (!side.open(&error)) {
    std::printf("two processes: cannot open: %s\n\n", error.c_str());
    return 1;
  }
  if (!side.exchangeNames(&error)) {
    std::printf("two processes: %s\n\n", error.c_str());
    return 1;
  }
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, size) != 0) return 1;
  auto* buf = static_cast<uint8_t*>(mem);
  std::memset(buf, 0, size);
  fid_mr* mr = side.reg(buf, size, FI_REMOTE_WRITE | FI_REMOTE_READ, 0x5150, &error);
  uint8_t small[kSmall];
  fid_mr* smallMr = mr ? side.reg(small, sizeof(small), FI_RECV, 0x5151, &error) : nullptr;
  if (smallMr == nullptr) {
    std::printf("two processes: %s\n\n", error.c_str());
    return 1;
  }
  Msg region;
  region.op = kRegion;
  region.v[0] = side.virtAddr() ? reinterpret_cast<uintptr_t>(buf) : 0;
  region.v[1] = fi_mr_key(mr);
  region.v[2] = size;
  if (!side.send(region)) return 1;
  std::printf("two processes (target buffer %zu bytes, key %s, %s addressing):\n", size,
              hex(region.v[1]).c_str(), side.virtAddr() ? "virtual" : "offset");

  fi_context2 recvCtx{};
  uint32_t current = 0;
  // The unexpected-message test: its receives, and what came in.
  static uint8_t floodBufs[kFloodPosted][kSmall];
  fi_context2 floodCtx[kFloodPosted];
  std::vector<int> floodGot(kFlood, 0);
  fid_mr* floodMr = side.reg(floodBufs, sizeof(floodBufs), FI_RECV, 0x5152, &error);
  if (floodMr == nullptr) {
    std::printf("two processes: %s\n\n", error.c_str());
    return 1;
  }
  auto postFlood = [&](int slot) {
    return fi_trecv(side.ep(), floodBufs[slot], kSmall, side.desc(floodMr), FI_ADDR_UNSPEC,
                    kFloodTag, 0xfffff, &floodCtx[slot]);
  };
  // Is the region this completion names complete in memory right now? (And, in the
  // unexpected-message test, repost at once.)
  side.check = [&](const fi_cq_tagged_entry& e) -> int {
    if (current == kFloodTest && e.op_context >= static_cast<void*>(&floodCtx[0]) &&
        e.op_context < static_cast<void*>(&floodCtx[kFloodPosted])) {
      int slot = static_cast<int>(static_cast<fi_context2*>(e.op_context) - floodCtx);
      uint32_t index;
      std::memcpy(&index, floodBufs[slot], sizeof(index));
      if (index < kFlood && (e.tag & 0xfffff) == index) ++floodGot[index];
      postFlood(slot);  // -FI_EAGAIN would show as a missing message
      return -1;
    }
    bool writes = current == kWriteNoRecv || current == kWriteZero || current == kWriteBurst ||
                  current == kPlainWrite || current == kWriteWithRecv;
    if (!writes || (e.flags & FI_REMOTE_CQ_DATA) == 0) return -1;
    int index = static_cast<int>(e.data & 0xffff);
    if ((e.data & ~0xffffULL) != (dataOf(current, 0) & ~0xffffULL) || index >= kBurst) return 0;
    // The plain write's test: its bytes must be there when the later writedata completes.
    for (int r = current == kPlainWrite ? 0 : index; r <= index; ++r) {
      size_t offset, bytes;
      regionOf(current, r, size, &offset, &bytes);
      for (size_t k = 0; k < bytes; ++k)
        if (buf[offset + k] != patternByte(current, r, k)) return 0;
    }
    return 1;
  };
  for (;;) {
    Msg start;
    if (!side.waitMsg(&start, 20 * kWaitMs)) return 1;
    if (start.op == kEnd) break;
    uint32_t t = current = start.test;
    std::memset(buf, 0, size);
    std::memset(small, 0, sizeof(small));
    bool posted = false;
    ssize_t rc = 0;
    fid_ep* ep = side.ep();
    if (t == kTaggedIgnore || t == kTaggedData) {
      rc = side.post([&] {
        return fi_trecv(ep, small, sizeof(small), side.desc(smallMr), FI_ADDR_UNSPEC, kTagBase,
                        kTagIgnore, &recvCtx);
      });
      posted = rc == 0;
    } else if (t == kFloodTest) {
      std::fill(floodGot.begin(), floodGot.end(), 0);
      for (int slot = 0; slot < kFloodPosted && rc == 0; ++slot)
        rc = side.post([&] { return postFlood(slot); });
    } else if (t == kWriteWithRecv) {
      rc = side.post([&] {
        return fi_recv(ep, small, sizeof(small), side.desc(smallMr), FI_ADDR_UNSPEC, &recvCtx);
      });
      posted = rc == 0;
    }
    side.seen.clear();
    Msg ready;
    ready.op = kReady;
    if (!side.send(ready)) return 1;
    side.pollFor(targetWants(t), kWaitMs);
    side.pollFor(targetWants(t) + 1, kGraceMs);  // anything extra?
    Msg report;
    if (!side.waitMsg(&report, 10 * kWaitMs) || report.op != kReport) return 1;
    side.drain();
    std::printf("  [%u] %s:\n", t, testName(t));
    if (rc != 0) std::printf("      target post failed: %s\n", fi_strerror(static_cast<int>(-rc)));
    if (report.v[0] != 0)
      std::printf("      initiator post failed: %s\n", fi_strerror(static_cast<int>(report.v[0])));
    std::printf("      initiator: %" PRIu64 " completion(s) [%s]\n", report.v[1], report.text);
    std::printf("      target: %zu completion(s), %zu expected\n", side.seen.size(),
                targetWants(t));
    bool inOrder = true;
    int lastIndex = -1;
    bool recvDone = false;
    if (t == kFloodTest) {
      int distinct = 0, twice = 0, errors = 0;
      for (int n : floodGot) distinct += n > 0, twice += n > 1;
      for (const Seen& seen : side.seen) errors += seen.err != 0;
      std::printf("      %d of %d messages arrived (%d more than once, %d error entries)%s\n",
                  distinct, kFlood, twice, errors,
                  distinct == kFlood ? "" : ": MESSAGES LOST OR STUCK");
      // Take the receives back before the next test.
      for (fi_context2& ctx : floodCtx) fi_cancel(&ep->fid, &ctx);
      side.pollFor(side.seen.size() + kFloodPosted, kGraceMs);
    }
    for (size_t k = 0; t != kFloodTest && k < side.seen.size(); ++k) {
      const Seen& s = side.seen[k];
      if (s.e.op_context == &recvCtx) recvDone = true;
      if (s.err) {
        std::printf("      #%zu error: %s, op_context %s\n", k, s.errText.c_str(),
                    contextText(s.e.op_context, &recvCtx).c_str());
        continue;
      }
      bool isData = (s.e.flags & FI_REMOTE_CQ_DATA) != 0;
      if (t == kWriteBurst && isData) {
        int index = static_cast<int>(s.e.data & 0xffff);
        inOrder &= index == lastIndex + 1;
        lastIndex = index;
        // The burst in a few lines: the first, the last, and any that differs from the first.
        if (k > 0 && k + 1 < side.seen.size() && s.visible == side.seen[0].visible &&
            s.e.flags == side.seen[0].e.flags && s.e.op_context == side.seen[0].e.op_context)
          continue;
      }
      std::string line = format("      #%zu flags %s, op_context %s, len %zu, buf %p", k,
                                cqFlagText(s.e.flags).c_str(),
                                contextText(s.e.op_context, &recvCtx).c_str(), s.e.len, s.e.buf);
      if (isData) line += ", data " + hex(s.e.data);
      if (s.e.flags & FI_TAGGED) line += ", tag " + hex(s.e.tag);
      if (s.visible >= 0) line += s.visible ? ", data visible" : ", DATA NOT (ALL) VISIBLE";
      std::printf("%s\n", line.c_str());
    }
    if (t == kWriteBurst) {
      std::printf("      burst: %s order%s\n",
                  inOrder ? "completions in posting" : "completions OUT OF",
                  side.seen.size() > 2 ? "; middle lines alike to #0 left out" : "");
    }
    if (t == kTaggedIgnore)
      std::printf("      sent tag %s; receive posted with tag %s ignore %s\n",
                  hex(kTagBase | 0xbeef).c_str(), hex(kTagBase).c_str(), hex(kTagIgnore).c_str());
    if (t == kWriteWithRecv) {
      std::printf("      the posted receive %s\n",
                  recvDone ? "completed (see op_context above)" : "is still posted");
    }
    if (posted && !recvDone) {
      // Take back a receive nothing matched, so it cannot catch a later test's message.
      fi_cancel(&ep->fid, &recvCtx);
      side.pollFor(side.seen.size() + 1, kGraceMs);
    }
    Msg done;
    done.op = kDone;
    if (!side.send(done)) return 1;
  }
  Msg bye;
  bye.op = kEnd;
  side.send(bye);
  side.pollFor(1000000, kGraceMs);  // let the initiator's last completions through
  std::printf("\n");
  std::fflush(stdout);
  fi_close(&floodMr->fid);
  fi_close(&smallMr->fid);
  fi_close(&mr->fid);
  side.close();
  std::free(mem);
  return 0;
}

int probe(const std::string& provider, size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 1;
  std::fflush(stdout);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] == 0) {
      ::close(fds[1 - rank]);
      int rc = rank == 0 ? runInitiator(provider, fds[0], size) : runTarget(provider, fds[1], size);
      std::fflush(stdout);
      _exit(rc);
    }
  }
  ::close(fds[0]);
  ::close(fds[1]);
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed = 1;
  }
  if (failed) std::printf("(provider \"%s\": a side failed; see above)\n\n", provider.c_str());
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> providers;
  size_t size = size_t{1} << 20;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--provider" && i + 1 < argc) {
      providers.push_back(argv[++i]);
    } else if (arg == "--size" && i + 1 < argc) {
      size = std::strtoull(argv[++i], nullptr, 10);
      if (size < 4096 * 2) {
        std::fprintf(stderr, "fabric-rma-probe: --size must be at least 8192\n");
        return 2;
      }
      size &= ~size_t{4095};
    } else {
      std::fprintf(stderr,
                   "usage: %s [--provider NAME]... [--size BYTES]\n"
                   "  default providers: shm, tcp, \"tcp;ofi_rxm\"; tcp uses lo unless "
                   "FI_TCP_IFACE is set\n",
                   argv[0]);
      return arg == "-h" || arg == "--help" ? 0 : 2;
    }
  }
  if (providers.empty()) providers = {"shm", "tcp", "tcp;ofi_rxm"};
  setenv("FI_TCP_IFACE", "lo", 0);
  int failed = 0;
  for (const std::string& provider : providers) failed |= probe(provider, size);
  return failed;
}
