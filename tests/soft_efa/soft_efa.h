// The software EFA device's objects as one process sees them. Each verbs object the provider
// gets is the first member of one of these, so that a pointer converts back.
#pragma once

#include <infiniband/efadv.h>
#include <infiniband/verbs.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "shared.h"

namespace nnf::softefa {

struct Device {
  ibv_device ibv;  // first: the provider holds &ibv
  int index;       // in this process's list (NNF_SOFT_EFA_PCI order)
  uint32_t slot;   // registry device slot
  std::string pci;
  ibv_gid gid;
};

struct Context {
  verbs_context vctx;  // the provider holds &vctx.context
  Device* device;
  // Address handles by GID, one number per GID however many AHs name it (the AV looks peers up
  // by the number a receive completion carries).
  std::map<std::array<uint8_t, 16>, std::pair<uint16_t, int>> ahs;  // gid -> (ahn, refs)
  uint16_t nextAhn = 1;
};

struct Pd {
  ibv_pd ibv;
  uint32_t id;
};

struct Mr {
  ibv_mr ibv;
  uint32_t slot;
  void* mapping = nullptr;  // a DMA-BUF's mapping, this device's own
  size_t mappingLength = 0;
};

struct Ah {
  ibv_ah ibv;
  ibv_gid gid;
  int target;  // registry device slot of the GID, -1: no such device
  uint16_t ahn;
};

struct Cq {
  ibv_cq_ex ex;  // first: ibv_cq and ibv_cq_ex pointers are this
  efadv_cq dv;
  Context* ctx;
  uint64_t id;
  CqRing* ring;
  size_t ringSize;
  Cqe cur;  // the completion start_poll/next_poll made current
};

enum class Op : uint8_t { kSend, kWrite, kRead };

// One operation the send queue holds until it completes.
struct SendWqe {
  uint64_t wrId = 0;
  Op op = Op::kSend;
  bool hasImm = false;
  bool isInline = false;
  uint32_t imm = 0;
  uint32_t rkey = 0;
  uint64_t remoteAddr = 0;
  Ah* ah = nullptr;
  uint32_t remoteQpn = 0;
  uint32_t remoteQkey = 0;
  uint32_t numSge = 0;
  std::array<ibv_sge, kMaxSqSge> sge{};
  std::array<uint8_t, kInlineSize> inlineData{};
  uint64_t length = 0;
  // Progress: delayed `hold` more passes (or until retryAtNs after an RNR); a write or read
  // lands in `pieces` pieces (cuts[i]..cuts[i+1]) in the order `order`, `done` of them so far;
  // then the target's completion (`owed`) goes into its ring, then ours (status) into ours.
  uint32_t hold = 0;
  uint32_t rnrTries = 0;
  uint64_t retryAtNs = 0;
  uint8_t pieces = 1;
  uint8_t done = 0;
  std::array<uint8_t, 4> order{};
  std::array<uint64_t, 5> cuts{};
  enum Phase : uint8_t { kWork, kDeliver, kComplete } phase = kWork;
  bool haveReceive = false;  // owed.wrId names the receive this message took
  Cqe owed{};
  uint32_t status = 0;  // EFA completion status of our completion
  // Held by a silent link (link.cc) since silencedAtNs: it fails as unresponsive remote, wherever
  // it stopped, once SRD's retries ran out (Config::silentGiveUpMs) or the link speaks again.
  bool silenced = false;
  uint64_t silencedAtNs = 0;
};

struct Qp {
  ibv_qp_ex ex;  // first: ibv_qp and ibv_qp_ex pointers are this
  Context* ctx;
  Pd* pd;
  Cq* sendCq;
  Cq* recvCq;
  uint32_t qpn;
  uint32_t qkey = 0;
  uint8_t rnrRetry = kInfiniteRnrRetry;
  bool unsolicited = false;
  bool sqSigAll = false;
  uint64_t sendOps = 0;  // IBV_QP_EX_WITH_* the creator asked for
  uint32_t maxSendWr, maxRecvWr, maxSendSge, maxRecvSge, maxInline;
  uint64_t ringId;
  QpRing* ring;
  size_t ringSize;
  int owner;  // the pid that created it (a forked child does not drive its parent's queues)
  // Posted and not yet polled, as rdma-core counts a full queue.
  uint32_t sqOutstanding = 0;
  uint32_t rqOutstanding = 0;
  // The wr_start..wr_complete session, then what the device works on.
  int sessionErr = 0;
  std::vector<SendWqe> session;
  std::vector<SendWqe> pending;
};

// Per-process state, guarded by mutex: every entry point that touches queues takes it.
struct Process {
  std::recursive_mutex mutex;
  // The device's own thread (the NIC works while the program does not call in): started by the
  // first post in each process, woken by every post.
  std::condition_variable_any wake;
  int threadPid = 0;
  uint64_t moves = 0;  // bytes moved or completions written: progress was made
  std::vector<Qp*> qps;
  uint64_t rng = 0;
  std::map<uint64_t, std::pair<void*, size_t>> remotes;  // mapped peer rings by id
  // Traffic per registry device slot: bytes written, sent, read.
  std::map<uint32_t, std::array<uint64_t, 3>> traffic;
};

Process& process();
uint64_t nextRandom(Process& proc);
uint64_t nowNs();

// device.cc
std::vector<Device*>& devices();
Context* contextOf(ibv_context* context);
const Device* deviceBySlot(uint32_t slot);
// The registry device slot a GID names, -1 when none in this namespace.
int slotOfGid(const ibv_gid& gid);
void fillDeviceAttr(const Device& device, ibv_device_attr* attr);

// memory.cc: what a key names, checked as the device checks it.
struct Region {
  int pid;
  uint32_t device;
  uint32_t pd;
  uint32_t access;
  uint64_t iova;
  uint64_t length;
  uint64_t alias;
};
bool lookupKey(uint32_t key, Region* region);
// The CPU address (in the owner) of [addr, addr+length) under `key`, 0 when the key does not
// cover it or lacks `access`, or names another owner, device or PD than asked.
uint64_t translate(uint32_t key, uint64_t addr, uint64_t length, int pid, uint32_t device,
                   uint32_t pd, uint32_t access);
// Copies between this process's CPU addresses and another process's (or its own); false with
// errno (ESRCH: the process is gone; EFAULT: an address is not mapped) on failure.
bool copyTo(int pid, const struct iovec* local, size_t nLocal, const struct iovec* remote,
            size_t nRemote);
bool copyFrom(int pid, const struct iovec* local, size_t nLocal, const struct iovec* remote,
              size_t nRemote);

// cq.cc
Cq* createCq(Context* ctx, int cqe, uint64_t wcFlags, uint64_t dvFlags);
int destroyCq(Cq* cq);

// qp.cc
int postRecv(ibv_qp* ibvQp, ibv_recv_wr* wr, ibv_recv_wr** bad);
Qp* createQp(Context* ctx, ibv_qp_init_attr_ex* attr, const efadv_qp_init_attr* dv);
void* mapRemote(Process& proc, uint64_t id);
void unmapRemote(Process& proc, uint64_t id);

// engine.cc: runs the device's work for this process's queue pairs (proc.mutex held).
void progress(Process& proc);
// After a post (proc.mutex held): makes sure the device's thread runs and wakes it.
void kick(Process& proc);
// Appends this process's traffic per device to NNF_SOFT_EFA_STATS; -1 when unset or unwritable.
int writeStats();
void onPolled(Process& proc, const Cq& cq, const Cqe& cqe);

// link.cc: links that go down and come back (config.h, NNF_SOFT_EFA_FAIL_AFTER_*). Each takes
// proc.mutex held. noteLinkPost counts one send-queue operation posted on `qp`; linkFailure is
// the status an operation meets when its device's link or its target's is down (kOk when both
// are up; `posting`: the check of a post, where the operation schedule moves); noteLinkSuccess
// records that the target answered (later failures are
// "unresponsive", not "unreachable").
void noteLinkPost(const Qp& qp);
uint32_t linkFailure(const Qp& qp, const SendWqe& wqe, bool posting);
void noteLinkSuccess(const Qp& qp, const SendWqe& wqe);
// Whether the link `wqe` takes is silent (its queue pair's NIC, or its target's, named "s<n>" in
// FILE.<pid> by the process that owns it): it stays where it is meanwhile. proc.mutex held.
bool linkSilent(const Qp& qp, const SendWqe& wqe);
// This process's view of its links brought up to date and published (where it polls).
void refreshLinks();
// Takes back the link votes of processes that ended (at each device's opening, without
// proc.mutex): they would keep a link down for every later process.
void dropVotesOfEndedProcesses();

// efa_io_comp_status values (rdma-core's efa_io_defs.h), which libfabric reads as vendor_err.
enum Status : uint32_t {
  kOk = 0,
  kFlushed = 1,
  kLocalQpInternal = 2,
  kLocalUnsupportedOp = 3,
  kLocalInvalidAh = 4,
  kLocalInvalidLkey = 5,
  kLocalBadLength = 6,
  kRemoteBadAddress = 7,
  kRemoteAbort = 8,
  kRemoteBadDestQpn = 9,
  kRemoteRnr = 10,
  kRemoteBadLength = 11,
  kRemoteBadStatus = 12,
  kLocalUnresponsiveRemote = 13,
  kRemoteUnknownPeer = 14,
  kLocalUnreachableRemote = 15,
};
ibv_wc_status wcStatus(uint32_t status);

}  // namespace nnf::softefa
