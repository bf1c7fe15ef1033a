// Writes held back on one NIC (NNF_EFA_RULES_HOLD_NIC=n:ms): the initiator's completion comes at
// once, as tcp's does once the bytes are in the socket, and the bytes reach the target only `ms`
// later. On EFA a write completes once the peer's NIC placed it; the stand-in's tcp base does
// not promise that either, and this makes the difference as large as a test needs. The bytes are
// copied when the write is posted, so the initiator may reuse its buffer as the completion says.
//
// Reads held back (NNF_EFA_RULES_HOLD_READS=ms): handed to the base `ms` after they were posted,
// so that the NIC reads the source then, as a busy NIC may long after the post; the completion
// follows the read. A caller that reuses the source before the completion sees its new bytes
// arrive.
#include <atomic>
#include <cstring>

#include "efa_rules.h"

namespace efa_rules {
namespace {

// Keys of the copies' registrations, for a base that takes the caller's keys (tcp on 1.17): apart
// from ours (mr.cc, 0xefa << 40) and unique, or the second copy would be refused (-FI_ENOKEY) and
// its write go at once.
constexpr uint64_t kHeldKeyBase = uint64_t{0xefb} << 40;
std::atomic<uint64_t> g_nextHeldKey{kHeldKeyBase};

}  // namespace

bool holdWrite(Ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest, uint64_t addr,
               uint64_t key) {
  Domain* domain = ep->domain;
  std::lock_guard<std::mutex> guard(domain->heldMutex);
  HeldWrite& write = domain->held.emplace_back();
  write.baseEp = ep->base;
  write.bytes.assign(static_cast<const char*>(buf), static_cast<const char*>(buf) + len);
  write.data = data;
  write.dest = dest;
  write.addr = addr;
  write.key = key;
  write.due = std::chrono::steady_clock::now() + std::chrono::milliseconds(domain->holdMs);
  if (len > 0 && fi_mr_reg(domain->base, write.bytes.data(), len, FI_WRITE, 0, g_nextHeldKey++, 0,
                           &write.mr, nullptr) != 0) {
    domain->held.pop_back();
    return false;
  }
  return true;
}

void releaseDueWrites(Domain* domain) {
  std::lock_guard<std::mutex> guard(domain->heldMutex);
  auto now = std::chrono::steady_clock::now();
  for (HeldWrite& write : domain->held) {
    if (write.posted || write.due > now) continue;
    ssize_t ret = fi_writedata(write.baseEp, write.bytes.data(), write.bytes.size(),
                               write.mr != nullptr ? fi_mr_desc(write.mr) : nullptr, write.data,
                               write.dest, write.addr, write.key, &write.context);
    if (ret == -FI_EAGAIN) return;  // in order: the next read tries again
    write.posted = true;            // a failure is lost with it, as on a broken link
  }
}

bool takeHeldCompletion(Domain* domain, void* context) {
  std::lock_guard<std::mutex> guard(domain->heldMutex);
  for (auto it = domain->held.begin(); it != domain->held.end(); ++it) {
    if (&it->context != context) continue;
    if (it->mr != nullptr) fi_close(&it->mr->fid);
    domain->held.erase(it);
    return true;
  }
  return false;
}

void dropHeldWrites(Domain* domain) {
  std::lock_guard<std::mutex> guard(domain->heldMutex);
  for (HeldWrite& write : domain->held) {
    if (write.mr != nullptr) fi_close(&write.mr->fid);
  }
  domain->held.clear();
  domain->heldReads.clear();
}

void holdRead(Ep* ep, const iovec* iov, void* const* baseDesc, size_t count, fi_addr_t src,
              const fi_rma_iov* rma, size_t rmaCount, void* context, uint64_t flags) {
  Domain* domain = ep->domain;
  std::lock_guard<std::mutex> guard(domain->heldMutex);
  HeldRead& read = domain->heldReads.emplace_back();
  read.baseEp = ep->base;
  read.count = count;
  for (size_t i = 0; i < count; ++i) {
    read.iov[i] = iov[i];
    read.desc[i] = baseDesc[i];
  }
  read.src = src;
  read.rmaCount = rmaCount;
  for (size_t i = 0; i < rmaCount; ++i) read.rma[i] = rma[i];
  read.context = context;
  read.flags = flags;
  read.due = std::chrono::steady_clock::now() + std::chrono::milliseconds(domain->holdReadsMs);
}

void releaseDueReads(Domain* domain) {
  std::lock_guard<std::mutex> guard(domain->heldMutex);
  auto now = std::chrono::steady_clock::now();
  while (!domain->heldReads.empty() && domain->heldReads.front().due <= now) {
    HeldRead& read = domain->heldReads.front();
    fi_msg_rma msg{read.iov, read.desc,     read.count,   read.src,
                   read.rma, read.rmaCount, read.context, 0};
    ssize_t ret = fi_readmsg(read.baseEp, &msg, read.flags);
    if (ret == -FI_EAGAIN) return;  // in order: the next read of the CQ tries again
    domain->heldReads.pop_front();  // a failure is lost with it, as on a broken link
  }
}

}  // namespace efa_rules
