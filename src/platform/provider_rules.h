// Each provider family's rules as data: the endpoint options to set before enabling, what a
// refusal costs, the environment defaults, and the tag bits the provider must match. The core
// asks here and applies; nothing in this layer touches libfabric objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nnf::platform {

enum class Family { kEfa, kShm, kTcp, kOther };

// "efa", "shm", "tcp" / "tcp;ofi_rxm" (the core provider names the family), anything else.
Family familyOf(const std::string& provName);
const char* familyName(Family family);

// Option numbers as libfabric defines them (fi_endpoint.h, fi_ext.h). They are part of the ABI,
// so we carry them ourselves: a plugin built against 1.17 headers still sets them on a 2.x
// runtime, and an older runtime answers -FI_ENOPROTOOPT, which counts as a refusal.
namespace opt {
constexpr int kLevelEndpoint = 0;  // FI_OPT_ENDPOINT
constexpr int kCudaApiPermitted = 10;
constexpr int kSharedMemoryPermitted = 11;
constexpr int kMaxRmaSize = 14;           // size_t, read-only (libfabric 1.20+)
constexpr int kEfaBase = -(0xefa << 16);  // -FI_PROV_SPECIFIC_EFA
constexpr int kEfaRnrRetry = kEfaBase;
constexpr int kEfaEmulatedWrite = kEfaBase + 2;  // read only: writes done in software
constexpr int kEfaSendRecvInOrderAligned128 = kEfaBase + 5;
constexpr int kEfaWriteInOrderAligned128 = kEfaBase + 6;
}  // namespace opt

// What a provider refusing an option costs us.
enum class Refusal {
  kHostMemoryOnly,  // GPU buffers would make the provider call CUDA from NCCL's proxy thread
  // No 128-byte ordering: LL128 could read torn lines. LL stays safe: its 8-byte flag-and-data
  // words are each written whole, in any order.
  kNoLL128,
  kNoReadFlush,  // the flush read could take the shared-memory path and flush nothing
};

// When an option applies.
enum class When {
  kAlways,
  kHmem,       // the endpoint was opened with FI_HMEM
  kReadFlush,  // GPUDirect flushes read from our own endpoint
  kRmaWrite,   // the protocol writes with RMA
  kSendRecv,   // the protocol sends tagged messages
};

struct EndpointOption {
  const char* name;  // as in libfabric's headers, for log lines
  int level;
  int optname;
  bool value;  // every option we set is a bool
  When when;
  Refusal onRefused;
  const char* why;
};

struct EnvDefault {
  const char* name;
  const char* value;
  const char* why;
};

struct ProviderRules {
  Family family;
  std::vector<EndpointOption> options;
  std::vector<EnvDefault> envDefaults;
  // Unordered delivery (SRD): LL/LL128 are safe only with the in-order-128 options.
  bool unorderedDelivery;
  // The provider copies injected bytes with the CPU (no descriptor): host memory only.
  bool injectCopiesWithCpu;
  // A read-only bool endpoint option that is true where the provider emulates RMA writes in
  // software (EFA without device RDMA write: p4d, or FI_EFA_USE_DEVICE_RDMA=0); auto then keeps
  // sendrecv. 0: the provider has none, its writes count as real.
  int writesEmulatedOption = 0;
  // rdma protocol: messages up to this size may go eagerly into the receiver's bounce entries
  // before their receive is posted (NCCL_FABRIC_EAGER_MAX overrides). 0: never.
  size_t eagerMaxBytes = 0;
  // The provider completes a write larger than its inject size only once the target process
  // progresses (shm): eager messages then fit the inject size, header included.
  bool writesWaitForTarget = false;
  // The endpoint needs an event queue bound: efa reports a failed handshake with a peer there
  // and aborts the process when the endpoint has none (libfabric 2.1 efa_base_ep).
  bool bindEventQueue = false;
  // The largest RMA write the provider does as one (0: no limit of its own). EFA cuts a larger
  // one into pieces that each carry the same immediate data, so the target would count one
  // segment twice.
  size_t largestWriteBytes = 0;
  // A write of several local buffers of different memory types (host header, GPU message) goes
  // as the device would write each. EFA sends such a write with immediate data as one emulated
  // eager packet copied with the first buffer's memory type for every buffer: a CPU copy of GPU
  // memory (efa_rdm_fabric.c: mixed_hmem_iov not advertised). False: GPU messages never eager.
  bool writesMixedMemoryIovs = true;
};

const ProviderRules& rulesFor(Family family);

// What the endpoint about to be opened does; selects the options that apply.
struct EndpointNeeds {
  bool hmem = false;
  bool readFlush = false;
  bool rmaWrite = false;
  bool sendRecv = true;
};
std::vector<EndpointOption> optionsFor(const ProviderRules& rules, const EndpointNeeds& needs);

// libfabric's FI_TAG_GENERIC (not in its public headers): fields of alternating bits over all 64.
constexpr uint64_t kTagGeneric = 0xaaaaaaaaaaaaaaaaULL;

// mem_tag_format is a field layout (FI_TAG_GENERIC is 0xaaaa...); its highest set bit says how
// wide a tag the provider matches (cxi: FI_TAG_GENERIC >> 16, 48 bits). 0: not stated, all 64.
uint64_t matchableTagBits(uint64_t memTagFormat);
// Whether `bitsUsed` (core/tags.h) fits; otherwise `why` says what the provider and we need.
bool tagFormatFits(uint64_t memTagFormat, uint64_t bitsUsed, std::string* why);

// Whether tagged receives with ignore bits (the drains of closed comm ids) are safe. shm before
// libfabric 2.0 keeps the ignore mask of a completed wildcard receive in its recycled receive
// entries and matches later unexpected messages with it: a message for one comm would land in
// another comm's buffer. `fiVersion` is fi_version() at run time.
bool wildcardReceivesSafe(Family family, uint32_t fiVersion);

// The largest message whose truncation (a send larger than its receive) the provider reports; 0:
// any size. libfabric's shm (1.17 and 2.1 alike) never completes a receive that a message sent
// by CMA/SAR (above its 4 KiB inject size) overflows. provider_quirks_test checks it.
size_t truncationReportLimit(Family family);

// Whether a receive smaller than its message harms more than that receive, so that tagged
// receives must never be truncated by the provider: shm (the hang above), and rxm over tcp in
// libfabric 1.x, which fails the connection that every comm to that peer shares (its tcp reads
// straight into the posted buffer). There each data receive gets room after its buffer (the
// device's scratch area as a second iov, host buffers) and the drains take whole messages; the
// plugin then reports the overflow on that receive alone. `provName` is the full provider name
// ("tcp;ofi_rxm"); isolation_test shows each case.
bool receivesNeedOverflowRoom(const std::string& provName);

// Whether a receive shorter than a message the provider moves by the receiver's RDMA read breaks
// the provider: efa before libfabric 2.3 frees the truncated long-read packet twice
// (ofiwg/libfabric#11808; the software EFA device shows it). There the drains of closed comms
// receive into a registered scratch of kLongReadDrainBytes, larger than NCCL's net messages.
bool truncatedLongReadsUnsafe(Family family, uint32_t fiVersion);

// Whether writes already posted may be taken back by removing their peer's address: the provider
// then ends them without a completion, and none lands later. efa from libfabric 2.3 only: before,
// it reads the removed peer when the device reports such a write as "unresponsive remote"
// (efa_rdm_cq_get_prov_errno: a NULL peer, SIGSEGV; the software EFA device shows it); tcp keeps
// the peer's connection, and its socket delivers what it holds (2.1's tcp has no remove handler).
// Elsewhere a silent path's writes are left to end on their own (SRD gives up on them).
bool postedWritesTakenBackSafely(Family family, uint32_t fiVersion);
constexpr size_t kLongReadDrainBytes = size_t{4} << 20;

}  // namespace nnf::platform
