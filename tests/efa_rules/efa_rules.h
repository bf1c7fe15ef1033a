// Internal declarations of the EFA-rules test provider: the wrapper objects, the configuration
// read from the environment, and the rule checks. See provider.cc for the overview.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "options.h"

namespace efa_rules {

// Returns -FI_ENOSYS for any operation we do not implement; fills an ops slot by its type.
template <typename F>
struct NoSys;
template <typename R, typename... A>
struct NoSys<R (*)(A...)> {
  static R fn(A...) { return static_cast<R>(-FI_ENOSYS); }
};
template <typename F>
void nosys(F& slot) {
  slot = &NoSys<F>::fn;
}

// Peers whose writes EFA would emulate (NNF_EFA_RULES_EMULATE_PEER): on a real fleet, peers whose
// device or libfabric version differs in RDMA-write or unsolicited-write support.
struct EmulatedPeers {
  bool all = false;   // "all": every peer but the endpoint itself
  uint32_t nics = 0;  // "nic:N": bit N, peers whose endpoint is on NIC N
  bool any() const { return all || nics != 0; }
};

// --- configuration (config.cc): read from the environment at each use, so forked test
// children can change it before they open objects.
struct Config {
  std::string base = "tcp";  // NNF_EFA_RULES_BASE
  bool hmem = true;          // NNF_EFA_RULES_HMEM
  bool hmemBase = false;     // NNF_EFA_RULES_HMEM_BASE: device memory goes to the base as such
  bool reorder = true;       // NNF_EFA_RULES_REORDER
  uint64_t seed = 0x5eed0efa;
  int tagBits = 0;  // 0: FI_TAG_GENERIC
  bool dmabuf = false;
  int nics = 1;  // NNF_EFA_RULES_NICS: EFA devices presented per base domain, 1..kMaxNics
  bool emulatedWrite = false;  // NNF_EFA_RULES_EMULATED_WRITE: getopt's FI_OPT_EFA_EMULATED_WRITE
  int failNic = -1;            // NNF_EFA_RULES_FAIL_NIC: every RMA write posted on this NIC fails
  uint32_t holdNics = 0;       // NNF_EFA_RULES_HOLD_NIC=n[,n...]:ms: bit n, writes on NIC n late
  int holdMs = 0;
  int holdReadsMs = 0;           // NNF_EFA_RULES_HOLD_READS=ms: RMA reads reach the base ms late
  EmulatedPeers emulatePeer;     // NNF_EFA_RULES_EMULATE_PEER
  int remoteWriteErrors = 0;     // NNF_EFA_RULES_REMOTE_WRITE_ERRORS: every Nth fails at the target
  bool interleaveErrors = true;  // NNF_EFA_RULES_INTERLEAVE_ERRORS: errors among successes
  int handshakeEagain = 2;       // NNF_EFA_RULES_HANDSHAKE_EAGAIN: -FI_EAGAIN posts per new peer
  std::set<std::string> refuse;
};
constexpr int kMaxNics = 8;
constexpr size_t kMaxIov = 16;  // iovs a post may have
Config loadConfig();
bool refused(const char* optionName);

// --- rules and reporting (report.cc).
enum class Rule {
  kMissingDescriptor = 1,
  kInjectDeviceMemory,
  kOptionAfterEnable,
  kTagFormat,
  kCudaApiPermitted,
  kSharedMemoryRead,
  kLl128Order,
  kDmabufRange,
  kWrongDomain,
  kRemoteKeyDomain,
  kMixedHmemIov,
  kCqDataSize,
  kRmaSize,
  kLastRule = kRmaSize,
};
constexpr int kProvErrnoBase = 0xefa000;   // prov_errno of a violation: base + rule number
constexpr int kFailedNicErrno = 0xefa0ff;  // prov_errno of a write on NNF_EFA_RULES_FAIL_NIC
// prov_errno of a remote write failed at its target (NNF_EFA_RULES_REMOTE_WRITE_ERRORS).
constexpr int kRemoteWriteErrno = 0xefa0fe;
// Bytes of immediate data EFA carries (cq_data_size): the device's 32-bit immediate.
constexpr size_t kEfaCqDataSize = 4;
// The longest write EFA makes one device write of: min(1 GiB, the device's max_rdma_size)
// (efa_rdm_ope.c, efa_env.efa_write_segment_size). A longer write with immediate data is cut
// into pieces that each complete at the target with the same immediate.
constexpr size_t kEfaMaxWriteBytes = size_t{1} << 30;
const char* ruleName(Rule rule);
// Appends the report line, prints to stderr and counts; returns the rule's prov_errno.
int violation(Rule rule, const std::string& detail);
uint64_t violationCount();
bool isRuleErrno(int provErrno);
// Whether the fake (or real) CUDA driver named by NCCL_FABRIC_CUDA_LIBRARY calls `p` device
// memory; a driver that is not initialised answers "host".
bool driverSaysDevice(const void* p);

struct Fabric;
struct Domain;
struct Cq;
struct Av;

// --- NICs (info.cc): our domain name of NIC `nic` over a base domain, "efa-<base>-rdm" for
// NIC 0 and "efa-<base>-rdm-<nic>" after it; and back. nicOf answers -1 for a name not ours.
std::string efaDomainName(const std::string& baseDomain, int nic);
int nicOf(const char* ourDomainName);

// --- per-domain traffic (stats.cc): bytes each domain name carried, as the initiator posted
// them; written to NNF_EFA_RULES_STATS at domain close, at exit and on demand.
struct Traffic {
  std::atomic<uint64_t> written{0};  // RMA writes (fi_write*, fi_inject_write*)
  std::atomic<uint64_t> sent{0};     // msg and tagged sends
  std::atomic<uint64_t> read{0};     // RMA reads (fi_read*)
};
Traffic* trafficOf(const std::string& domainName);
void writeStats();

// --- evidence (stats.cc): that the behaviour and the rules the plugin's suites rely on were at
// work in this process. Each rule has a pair: how often a post (or completion) came that the rule
// applies to, counted before any rule looks at it, and how often the rule's check then ran on
// one. A stand-in weakened by a setting or an edit (reordering off, FI_MR_LOCAL no longer
// claimed, a check bypassed) shows applicable > 0 with checked == 0, and the suites' own check
// (tests/support/test_env.cc) fails the plugin's tests with it. Written beside the traffic, one
// line "rules pid=<pid> <name>=<count> ..." with the totals so far.
enum class Evidence {
  kReorderable,         // completions handed out while an older one waited too
  kReordered,           //   of those, ones handed out before the older one
  kBufferPosts,         // posts of bytes from or into buffers (not injects)
  kDescriptorChecks,    //   of those, checked against a live MR under FI_MR_LOCAL (rule 1)
  kInjects,             // injects of bytes
  kInjectChecks,        //   of those, checked for device memory (rule 2)
  kTaggedPosts,         // tagged posts
  kTagChecks,           //   of those, checked against mem_tag_format (rule 4)
  kDescribedPosts,      // posts with a descriptor of a live MR
  kDomainChecks,        //   of those, checked for the MR's domain (rule 9)
  kNicKeyedRma,         // RMA with a remote key that names its NIC, several NICs presented
  kRemoteKeyChecks,     //   of those, checked against the target endpoint's NIC (rule 10)
  kMultiIovDataWrites,  // writes with immediate data and more than one iov
  kEmulatedChecks,      //   writes checked as EFA emulates them (rule 11)
  kDataPosts,           // posts with immediate data
  kImmediateChecks,     //   of those, checked for EFA's 4 bytes (rule 12)
  kDataWrites,          // writes with immediate data
  kWriteSizeChecks,     //   of those, checked for EFA's 1 GiB cut (rule 13)
  kFirstPostsToPeers,   // an endpoint's first transmit post to a peer it has not heard from
  kHandshakeEagains,    //   -FI_EAGAIN answered until that peer's handshake
  kTaggedRecvs,         // tagged receives
  kRoomyRecvs,          //   of those, posted with room so that EFA's truncation can be made
  kRemoteWrites,        // a peer's writes with data completed in EFA's form at the target
  kCount,
};
void note(Evidence what);
const char* evidenceName(Evidence what);

// --- endpoint addresses (addresses.cc): with several NICs, each enabled endpoint publishes its
// base address and NIC in a directory every process on the machine reads (the base is shared, so
// a peer's address names one of its endpoints), so that an initiator can tell which NIC an RMA
// targets.
// A base address without its "scheme://" and trailing NULs, as the AV and getname agree on it.
std::string canonicalAddress(const char* data, size_t len);
void publishAddress(const std::string& ownName, int nic);
void withdrawAddress(const std::string& ownName, int nic);
// The NIC of the endpoint at a base address, -1 when no live endpoint published it.
int publishedNic(const std::string& canonical);
// The NIC and the process of the endpoint at a base address; false when no live endpoint
// published it.
bool publishedEndpoint(const std::string& canonical, int* nic, long* pid);
// The directory the processes of a test share (NNF_EFA_RULES_ADDRESSES): addresses, and the
// link state each process publishes (link.cc).
std::string sharedDirectory();

// --- info translation (info.cc).
fi_info* toBaseHints(const fi_info* hints, const Config& config);
fi_info* toEfaInfo(const fi_info* base, const fi_info* hints, const Config& config, int nic);
// The base provider's fi_info for one of our fi_info (re-queried, matched on domain name).
fi_info* baseInfoFor(const fi_info* ours, const Config& config);
uint64_t tagMaskOf(uint64_t memTagFormat);
int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info);

// --- objects. Each starts with the libfabric fid it hands out.
struct Fabric {
  fid_fabric fid{};
  std::mutex mutex;
  std::map<std::string, fid_fabric*> bases;  // base fabric per base fabric name
  fid_fabric* baseFor(const fi_info* baseInfo, int* ret);
};
int openFabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);

// A write held back (held.cc): posted to the base once due; its base completion is ours.
struct HeldWrite {
  fi_context2 context;  // the base completion's op_context
  fid_ep* baseEp = nullptr;
  fid_mr* mr = nullptr;  // the copy's registration with the base domain
  std::vector<char> bytes;
  uint64_t data = 0;
  fi_addr_t dest = 0;
  uint64_t addr = 0;
  uint64_t key = 0;
  std::chrono::steady_clock::time_point due;
  bool posted = false;
};

// A read held back (held.cc, NNF_EFA_RULES_HOLD_READS): handed to the base once due, so that
// the bytes are read then; its base completion goes to the caller's context as it is.
struct HeldRead {
  fid_ep* baseEp = nullptr;
  iovec iov[kMaxIov];
  void* desc[kMaxIov];  // the base's
  size_t count = 0;
  fi_addr_t src = 0;
  fi_rma_iov rma[kMaxIov];  // the base's addresses and keys
  size_t rmaCount = 0;
  void* context = nullptr;
  uint64_t flags = 0;
  std::chrono::steady_clock::time_point due;
};

struct Domain {
  fid_domain fid{};
  Fabric* fabric = nullptr;
  fid_domain* base = nullptr;
  fi_info* info = nullptr;  // ours
  bool mrLocal = false;
  uint64_t baseMrMode = 0;  // keys and addresses follow EFA's mr_mode whatever the base's is
  uint64_t tagMask = ~0ULL;
  int nic = 0;               // our NIC index, from our domain name
  bool failsWrites = false;  // NNF_EFA_RULES_FAIL_NIC names this NIC
  int holdMs = 0;            // NNF_EFA_RULES_HOLD_NIC names this NIC: its writes' delay
  int holdReadsMs = 0;       // NNF_EFA_RULES_HOLD_READS: every read's delay
  // The base carries 8 bytes of immediate data: the upper 4, which EFA's callers cannot use,
  // carry a write's length to its target (immediate.cc).
  bool lengthInData = false;
  bool emulatedWrite = false;  // NNF_EFA_RULES_EMULATED_WRITE: every write emulated
  EmulatedPeers emulatePeer;   // NNF_EFA_RULES_EMULATE_PEER
  int handshakeEagain = 0;     // NNF_EFA_RULES_HANDSHAKE_EAGAIN
  std::mutex heldMutex;
  std::list<HeldWrite> held;  // held.cc
  std::list<HeldRead> heldReads;
  std::string name;  // our domain name
  Traffic* traffic = nullptr;
};
int openDomain(fid_fabric* fabric, fi_info* info, fid_domain** domain, void* context);

struct Av {
  fid_av fid{};
  fid_av* base = nullptr;
  Domain* domain = nullptr;
  std::mutex mutex;
  std::map<fi_addr_t, int> nics;  // target NIC per address, learnt at first RMA; -1 unknown
};
// The NIC of the endpoint `addr` names (published by its process), -1 when unknown.
int nicOfPeer(Av* av, fi_addr_t addr);
int openAv(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);

// A completion held back by the reordering CQ.
struct Pending {
  fi_cq_tagged_entry entry;
  fi_addr_t source;
  uint64_t arrival;  // the order the base (or the stand-in) made it in
};
struct Cq {
  fid_cq fid{};
  fid_cq* base = nullptr;
  Domain* domain = nullptr;
  size_t entrySize = 0;
  std::mutex mutex;
  bool reorder = true;
  std::mt19937_64 rng;
  std::vector<Pending> pending;
  uint64_t arrivals = 0;                   // completions queued in `pending` so far
  std::vector<fi_cq_err_entry> synthetic;  // our error completions, FIFO
  bool baseError = false;                  // the base reported -FI_EAVAIL
  bool interleave = true;                  // NNF_EFA_RULES_INTERLEAVE_ERRORS
  bool errorDue = false;      // a read said -FI_EAVAIL while successes wait: readerr gives it
  int remoteWriteErrors = 0;  // NNF_EFA_RULES_REMOTE_WRITE_ERRORS
  uint64_t remoteWrites = 0;  // remote writes with immediate data seen here
  std::set<fi_addr_t> heard;  // sources of messages received here (FI_SOURCE), for handshakes
  // Tagged receives posted with room after their buffers (see roomForReceive), by context: the
  // length the caller asked for. A completion longer than that is EFA's truncation error.
  std::map<void*, size_t> roomy;
  void pushError(void* context, uint64_t flags, int provErrno, int err = FI_EINVAL);
  void pushSuccess(void* context, uint64_t flags);  // a completion the base will not make
};
int openCq(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context);

struct Mr {
  fid_mr fid{};
  fid_mr* base = nullptr;
  uintptr_t start = 0;
  uintptr_t end = 0;
  bool device = false;  // registered with FI_HMEM_CUDA (or as a DMA-BUF)
  int deviceId = -1;    // the CUDA device of a FI_HMEM_CUDA registration; -1 unknown
  Domain* domain = nullptr;
};
void installMrOps(fi_ops_mr* ops);
// Turns a remote address and key as EFA callers give them (virtual address, our key) into the
// base's, for a base that takes offsets.
void baseRmaTarget(const Domain* domain, uint64_t* addr, uint64_t* key);
// The NIC whose domain registered a remote key, as an initiator on `domain` sees the key; -1
// where keys do not tell (one NIC, or a base that makes its own keys).
int nicOfKey(const Domain* domain, uint64_t key);
// The live MR behind a descriptor, or nullptr when `desc` is not one of ours.
Mr* liveMr(void* desc);
// Whether [p, p+len) lies in a range registered as device memory.
bool registeredAsDevice(const void* p, size_t len);

// Endpoint option state: -1 unset, 0 false, 1 true.
struct EpOptions {
  int cudaApiPermitted = -1;
  int sharedMemoryPermitted = -1;
  int sendrecv128 = -1;
  int write128 = -1;
  int useDeviceRdma = -1;
  size_t rnrRetry = 3;
};

struct Ep {
  fid_ep fid{};
  fid_ep* base = nullptr;
  Domain* domain = nullptr;
  Cq* txCq = nullptr;
  Cq* rxCq = nullptr;
  Av* av = nullptr;
  uint64_t caps = 0;
  bool hmem = false;
  bool enabled = false;
  bool ll128Checked[2] = {false, false};  // sendrecv, write
  bool ll128Reported = false;
  EpOptions options;
  std::string ownName;  // base address, for the shared-memory-read rule
  std::mutex peersMutex;
  // Per destination: -FI_EAGAIN answers given before its handshake; kHandshakeDone after it.
  std::map<fi_addr_t, int> handshakes;
  uint64_t handshakeEagains = 0;  // answers given, for tests (kOptEfaRulesHandshakeEagains)
};
constexpr int kHandshakeDone = -1;
int openEp(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);

// --- held writes (held.cc, NNF_EFA_RULES_HOLD_NIC). holdWrite copies a write whose address and
// key are the base's already (false: it could not be held); releaseDueWrites posts those due;
// takeHeldCompletion swallows a base completion of one (true when it was one).
bool holdWrite(Ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest, uint64_t addr,
               uint64_t key);
void releaseDueWrites(Domain* domain);
bool takeHeldCompletion(Domain* domain, void* context);
void dropHeldWrites(Domain* domain);
// NNF_EFA_RULES_HOLD_READS: holdRead keeps a read admitted with the base's descriptors and
// remote iovs; releaseDueReads hands those due to the base (called where completions are read).
void holdRead(Ep* ep, const iovec* iov, void* const* baseDesc, size_t count, fi_addr_t src,
              const fi_rma_iov* rma, size_t rmaCount, void* context, uint64_t flags);
void releaseDueReads(Domain* domain);
void installDataOps(Ep* ep);

// Whether `addr` names this endpoint itself (the AV's entry is our own base address).
bool isOwnAddress(Ep* ep, fi_addr_t addr);

// --- EFA's 32-bit immediate (immediate.cc). A post's immediate data with bits above 32: the
// text of the violation, "" when it fits. wireData: what goes to the base for a write with data
// of `len` bytes; fixRemoteWrite: a remote write's completion at the target as EFA makes it
// (op_context NULL, flags FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE, len the bytes written,
// data the 32-bit immediate); true when NNF_EFA_RULES_REMOTE_WRITE_ERRORS fails it instead (its
// error entry queued on the CQ).
std::string immediateTooWide(const char* op, uint64_t data);
uint64_t wireData(const Domain* domain, uint64_t data, size_t len);
bool isRemoteWrite(uint64_t flags);
bool fixRemoteWrite(Cq* cq, fi_cq_tagged_entry* entry);

// --- writes EFA emulates (emulated_write.cc): a write with immediate data and more than one iov
// (local or remote), every write where the device has no RDMA write
// (NNF_EFA_RULES_EMULATED_WRITE), and writes to peers of NNF_EFA_RULES_EMULATE_PEER. EFA copies
// their payload with desc[0]'s memory type for every iov: the text of the violation where an iov
// is of another type, "" when none is (or the write is not emulated).
std::string emulatedWriteMixesMemory(Ep* ep, const char* op, const iovec* iov, void* const* desc,
                                     size_t count, size_t rmaCount, bool withData, fi_addr_t dest);

// --- handshakes (handshake.cc): true, and one more -FI_EAGAIN counted, while a post to `dest`
// must wait for the first handshake with that peer (NNF_EFA_RULES_HANDSHAKE_EAGAIN).
bool awaitingHandshake(Ep* ep, fi_addr_t dest);

// EFA reports a message larger than its receive as FI_ETRUNC on that receive and goes on; the
// bases do not (tcp's rxm in libfabric 1.x fails the connection every comm shares, shm never
// completes a receive that a large message overflows). So every tagged receive goes to the base
// with this scratch area as a last iov (address space only), and the CQ turns a completion
// longer than the caller's buffer into EFA's truncation error (cq.cc).
void* roomForReceive(size_t* length);

}  // namespace efa_rules
