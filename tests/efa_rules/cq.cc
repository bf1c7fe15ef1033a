// The completion queue: drains the base CQ into a pending set and hands completions back in a
// seeded random order (SRD does not order them), never dropping, duplicating or starving one.
// Our own error completions (rule violations, failed remote writes) queue beside the base's, and
// come out at seeded random points among the successes (NNF_EFA_RULES_INTERLEAVE_ERRORS), as
// EFA's CQ gives each entry, good or bad, in the order the device completed it. A peer's write
// with data completes as EFA's does (immediate.cc).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "efa_rules.h"
#include "link.h"

namespace efa_rules {
namespace {

constexpr size_t kDrainBatch = 16;

size_t entrySizeOf(fi_cq_format format) {
  switch (format) {
    case FI_CQ_FORMAT_CONTEXT:
      return sizeof(fi_cq_entry);
    case FI_CQ_FORMAT_MSG:
      return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA:
      return sizeof(fi_cq_data_entry);
    case FI_CQ_FORMAT_TAGGED:
      return sizeof(fi_cq_tagged_entry);
    default:
      return 0;
  }
}

Cq* cqOf(fid_cq* cq) {
  return reinterpret_cast<Cq*>(cq);
}

// A tagged receive posted with room (ep_data.cc, roomForReceive) completed: true, and EFA's
// truncation error queued instead, when more came than the caller's buffer holds.
bool truncated(Cq* cq, const Pending& item) {
  auto it = cq->roomy.find(item.entry.op_context);
  if (it == cq->roomy.end()) return false;
  size_t length = it->second;
  cq->roomy.erase(it);
  if (item.entry.len <= length) return false;
  fi_cq_err_entry error{};
  error.op_context = item.entry.op_context;
  error.flags = item.entry.flags;
  error.len = length;
  error.tag = item.entry.tag;
  error.olen = item.entry.len - length;
  error.err = FI_ETRUNC;
  error.prov_errno = FI_ETRUNC;
  cq->synthetic.push_back(error);
  return true;
}

// Notes whether `pending[pick]`, about to be handed out, overtakes an older completion (the
// evidence that completions were reordered, efa_rules.h).
void noteOrder(const Cq* cq, size_t pick) {
  if (cq->pending.size() < 2) return;
  note(Evidence::kReorderable);
  uint64_t oldest = cq->pending[pick].arrival;
  for (const Pending& item : cq->pending) oldest = std::min(oldest, item.arrival);
  if (oldest != cq->pending[pick].arrival) note(Evidence::kReordered);
}

// Moves everything the base has into `pending`; remembers a base error entry for readerr.
int drain(Cq* cq) {
  if (cq->baseError) return 0;
  refreshLinks();
  giveUpWithheld(cq);  // link.cc: a silent link's operations SRD gave up on
  fi_cq_tagged_entry batch[kDrainBatch];
  fi_addr_t sources[kDrainBatch];
  for (;;) {
    ssize_t n = fi_cq_readfrom(cq->base, batch, kDrainBatch, sources);
    if (n == -FI_ENOSYS) {
      n = fi_cq_read(cq->base, batch, kDrainBatch);
      for (ssize_t i = 0; i < n; ++i) sources[i] = FI_ADDR_NOTAVAIL;
    }
    if (n == -FI_EAGAIN) return 0;
    if (n == -FI_EAVAIL) {
      cq->baseError = true;
      return 0;
    }
    if (n < 0) return static_cast<int>(n);
    auto* bytes = reinterpret_cast<const char*>(batch);
    for (ssize_t i = 0; i < n; ++i) {
      // A held write's completion was given when it was posted.
      if (cq->domain != nullptr && cq->domain->holdMs > 0 &&
          takeHeldCompletion(
              cq->domain,
              reinterpret_cast<const fi_cq_entry*>(bytes + i * cq->entrySize)->op_context)) {
        continue;
      }
      Pending item{};
      std::memcpy(&item.entry, bytes + i * cq->entrySize, cq->entrySize);
      item.source = sources[i];
      if (linkFailsCompletion(cq, item.entry)) continue;  // link.cc: its link went down
      if (isRemoteWrite(item.entry.flags) && fixRemoteWrite(cq, &item.entry)) continue;
      if ((item.entry.flags & FI_RECV) != 0 && item.source != FI_ADDR_NOTAVAIL)
        cq->heard.insert(item.source);  // that peer's handshake has come (handshake.cc)
      if (!cq->roomy.empty() && (item.entry.flags & FI_RECV) != 0 && truncated(cq, item)) continue;
      item.arrival = cq->arrivals++;
      cq->pending.push_back(item);
    }
    if (static_cast<size_t>(n) < kDrainBatch) return 0;
  }
}

ssize_t readFrom(fid_cq* f, void* buf, size_t count, fi_addr_t* srcAddr) {
  Cq* cq = cqOf(f);
  if (cq->domain != nullptr && cq->domain->holdMs > 0) releaseDueWrites(cq->domain);
  if (cq->domain != nullptr && cq->domain->holdReadsMs > 0) releaseDueReads(cq->domain);
  std::lock_guard<std::mutex> guard(cq->mutex);
  int ret = drain(cq);
  if (ret != 0) return ret;
  const bool errors = !cq->synthetic.empty() || cq->baseError;
  if (!errors) cq->errorDue = false;
  if (cq->pending.empty() || cq->errorDue) return errors ? -FI_EAVAIL : -FI_EAGAIN;
  if (count == 0) return -FI_EAGAIN;
  // An error among successes: as often as not, it is next.
  if (errors && cq->interleave && cq->rng() % 2 == 0) {
    cq->errorDue = true;
    return -FI_EAVAIL;
  }
  // At least one, and sometimes fewer than are there: the rest wait for a later read.
  size_t available = std::min(count, cq->pending.size());
  size_t deliver = available;
  if (cq->reorder) deliver = 1 + cq->rng() % available;
  auto* out = static_cast<char*>(buf);
  for (size_t i = 0; i < deliver; ++i) {
    size_t pick = cq->reorder ? cq->rng() % cq->pending.size() : 0;
    noteOrder(cq, pick);
    std::memcpy(out + i * cq->entrySize, &cq->pending[pick].entry, cq->entrySize);
    if (srcAddr != nullptr) srcAddr[i] = cq->pending[pick].source;
    if (cq->reorder) {
      cq->pending[pick] = cq->pending.back();
      cq->pending.pop_back();
    } else {
      cq->pending.erase(cq->pending.begin());
    }
  }
  return static_cast<ssize_t>(deliver);
}

ssize_t read(fid_cq* f, void* buf, size_t count) {
  return readFrom(f, buf, count, nullptr);
}

ssize_t readErr(fid_cq* f, fi_cq_err_entry* buf, uint64_t flags) {
  Cq* cq = cqOf(f);
  std::lock_guard<std::mutex> guard(cq->mutex);
  // An error is read once a read said so (errorDue) or nothing good is waiting.
  if (!cq->pending.empty() && !cq->errorDue) return -FI_EAGAIN;
  cq->errorDue = false;
  if (!cq->synthetic.empty()) {
    void* errData = buf->err_data;
    *buf = cq->synthetic.front();
    buf->err_data = errData;
    buf->err_data_size = 0;
    cq->synthetic.erase(cq->synthetic.begin());
    return 1;
  }
  if (!cq->baseError) return -FI_EAGAIN;
  ssize_t ret = fi_cq_readerr(cq->base, buf, flags);
  if (ret != -FI_EAGAIN) cq->baseError = false;
  if (ret == 1) cq->roomy.erase(buf->op_context);  // a cancelled or failed receive
  return ret;
}

ssize_t sreadFrom(fid_cq* f, void* buf, size_t count, fi_addr_t* srcAddr, const void*,
                  int timeout) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
  for (;;) {
    ssize_t ret = readFrom(f, buf, count, srcAddr);
    if (ret != -FI_EAGAIN) return ret;
    if (timeout >= 0 && std::chrono::steady_clock::now() >= deadline) return -FI_EAGAIN;
    std::this_thread::yield();
  }
}

ssize_t sread(fid_cq* f, void* buf, size_t count, const void* cond, int timeout) {
  return sreadFrom(f, buf, count, nullptr, cond, timeout);
}

const char* strError(fid_cq* f, int provErrno, const void* errData, char* buf, size_t len) {
  if (const char* link = linkFailedOperations() > 0 ? linkErrorText(provErrno) : nullptr) {
    if (buf == nullptr || len == 0) return link;
    std::snprintf(buf, len, "%s", link);
    return buf;
  }
  if (isRuleErrno(provErrno) || provErrno == kFailedNicErrno || provErrno == kRemoteWriteErrno) {
    static thread_local std::string text;
    text = provErrno == kFailedNicErrno
               ? std::string("efa-rules: this NIC fails its writes (NNF_EFA_RULES_FAIL_NIC)")
           : provErrno == kRemoteWriteErrno
               ? std::string(
                     "efa-rules: a remote write with immediate data failed at its target "
                     "(NNF_EFA_RULES_REMOTE_WRITE_ERRORS)")
               : std::string("efa-rules: rule ") +
                     ruleName(static_cast<Rule>(provErrno - kProvErrnoBase)) + " violated";
    if (buf != nullptr && len > 0) {
      std::snprintf(buf, len, "%s", text.c_str());
      return buf;
    }
    return text.c_str();
  }
  return fi_cq_strerror(cqOf(f)->base, provErrno, errData, buf, len);
}

int closeCq(fid* f) {
  auto* cq = reinterpret_cast<Cq*>(f);
  int ret = fi_close(&cq->base->fid);
  delete cq;
  return ret;
}

int controlCq(fid* f, int command, void* arg) {
  return fi_control(&reinterpret_cast<Cq*>(f)->base->fid, command, arg);
}

fi_ops makeFidOps() {
  fi_ops ops{};
  ops.size = sizeof(ops);
  ops.close = closeCq;
  nosys(ops.bind);
  ops.control = controlCq;
  nosys(ops.ops_open);
  nosys(ops.tostr);
  nosys(ops.ops_set);
  return ops;
}

fi_ops_cq makeCqOps() {
  fi_ops_cq ops{};
  ops.size = sizeof(ops);
  ops.read = read;
  ops.readfrom = readFrom;
  ops.readerr = readErr;
  ops.sread = sread;
  ops.sreadfrom = sreadFrom;
  nosys(ops.signal);
  ops.strerror = strError;
  return ops;
}

fi_ops g_fidOps = makeFidOps();
fi_ops_cq g_cqOps = makeCqOps();

}  // namespace

void Cq::pushError(void* context, uint64_t flags, int provErrno, int err) {
  std::lock_guard<std::mutex> guard(mutex);
  fi_cq_err_entry entry{};
  entry.op_context = context;
  entry.flags = flags;
  entry.err = err;
  entry.prov_errno = provErrno;
  synthetic.push_back(entry);
}

void Cq::pushSuccess(void* context, uint64_t flags) {
  std::lock_guard<std::mutex> guard(mutex);
  Pending item{};
  item.entry.op_context = context;
  item.entry.flags = flags;
  item.source = FI_ADDR_NOTAVAIL;
  item.arrival = arrivals++;
  pending.push_back(item);
}

int openCq(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context) {
  if (attr == nullptr) return -FI_EINVAL;
  size_t entrySize =
      entrySizeOf(attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format);
  if (entrySize == 0) return -FI_ENOSYS;
  fi_cq_attr baseAttr = *attr;
  if (baseAttr.format == FI_CQ_FORMAT_UNSPEC) baseAttr.format = FI_CQ_FORMAT_CONTEXT;
  fid_cq* base = nullptr;
  int ret = fi_cq_open(reinterpret_cast<Domain*>(domain)->base, &baseAttr, &base, nullptr);
  if (ret != 0) return ret;
  auto* ours = new (std::nothrow) Cq();
  if (ours == nullptr) {
    fi_close(&base->fid);
    return -FI_ENOMEM;
  }
  Config config = loadConfig();
  ours->fid.fid.fclass = FI_CLASS_CQ;
  ours->fid.fid.context = context;
  ours->fid.fid.ops = &g_fidOps;
  ours->fid.ops = &g_cqOps;
  ours->base = base;
  ours->domain = reinterpret_cast<Domain*>(domain);
  ours->entrySize = entrySize;
  ours->reorder = config.reorder;
  ours->interleave = config.interleaveErrors;
  ours->remoteWriteErrors = config.remoteWriteErrors;
  ours->rng.seed(config.seed);
  *cq = &ours->fid;
  return 0;
}

}  // namespace efa_rules
