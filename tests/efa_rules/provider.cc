// EFA-rules provider: a libfabric provider for tests only (libefa-rules-fi.so, loaded by the
// core through FI_PROVIDER_PATH). It presents itself as "efa" with EFA RDM's attributes, carries
// the bytes over a real provider underneath, hands completions back out of order as SRD may,
// and fails loudly when a caller breaks one of EFA's rules. Where libfabric 2.x's efa provider
// behaves in ways a reading of the rules misses, the stand-in does as it does (defaults as on a
// p5 between hosts of one software version):
//   - cq_data_size is 4 (the device's 32-bit immediate; rule 12). A peer's write with data
//     completes at the target with op_context NULL, flags FI_REMOTE_CQ_DATA | FI_RMA |
//     FI_REMOTE_WRITE, len the bytes written (tcp on 1.17 says 0: the initiator sends the length
//     in the base's upper 32 bits of immediate data, the target's CQ takes it out) and data the
//     32-bit immediate (immediate.cc).
//   - writes EFA emulates copy their payload as desc[0]'s memory type (rule 11,
//     emulated_write.cc): a write with data and more than one iov, every write with
//     NNF_EFA_RULES_EMULATED_WRITE=1, writes to NNF_EFA_RULES_EMULATE_PEER's peers.
//   - error completions come out among the successes (NNF_EFA_RULES_INTERLEAVE_ERRORS), remote
//     writes may fail at their target with a NULL-context error
//     (NNF_EFA_RULES_REMOTE_WRITE_ERRORS), and posts to a new peer answer -FI_EAGAIN until its
//     handshake (NNF_EFA_RULES_HANDSHAKE_EAGAIN, handshake.cc).
//
// Environment (read when objects are opened, except where noted):
//   NNF_EFA_RULES_BASE      base provider: tcp (default) or shm
//   NNF_EFA_RULES_HMEM      0: do not claim FI_HMEM (default 1)
//   NNF_EFA_RULES_HMEM_BASE 1: device memory is real GPU memory: ask the base for FI_HMEM and
//                           register device memory with it as such (tests/gpu; default 0: the
//                           base sees every buffer as host memory)
//   NNF_EFA_RULES_REORDER   0: completions in base order (default 1: seeded random order)
//   NNF_EFA_RULES_SEED      seed of the reordering (default 0x5eed0efa)
//   NNF_EFA_RULES_TAG_BITS  mem_tag_format = mask of that many low bits (default FI_TAG_GENERIC)
//   NNF_EFA_RULES_DMABUF    1: accept FI_MR_DMABUF registrations (default 0: -FI_EOPNOTSUPP)
//   NNF_EFA_RULES_REFUSE    comma list of options whose setopt returns -FI_EOPNOTSUPP:
//                           cuda_api_permitted, shared_memory_permitted, rnr_retry,
//                           use_device_rdma, sendrecv_in_order_aligned_128_bytes,
//                           write_in_order_aligned_128_bytes (some instance types refuse it)
//   NNF_EFA_RULES_SENDRECV_ORDER  1: accept sendrecv_in_order_aligned_128_bytes, as libfabric
//                           before 2.4 did (default: refused, as 2.4 and later do)
//   NNF_EFA_RULES_NICS      EFA devices (NICs) to present, 1..8 (default 1): fi_getinfo lists
//                           each base entry once per NIC, domain "efa-<base domain>-rdm" for NIC 0
//                           (the name with one NIC) and "efa-<base domain>-rdm-<n>" for NIC n;
//                           each NIC's domain opens its own base domain over the same base
//                           interface, and registers memory with keys that name the NIC
//   NNF_EFA_RULES_EMULATED_WRITE 1: FI_OPT_EFA_EMULATED_WRITE answers true, as on a NIC
//                           without device RDMA write (p4d), and every write is emulated (rule 11
//                           for any iov count); default 0, as on a p5 (the bytes move through the
//                           base's RMA either way)
//   NNF_EFA_RULES_EMULATE_PEER  comma list of "all" (every peer but the endpoint itself) and
//                           "nic:N" (peers whose endpoint is on NIC N; with one NIC every peer is
//                           on NIC 0): writes to them are emulated, as to hosts whose device or
//                           libfabric differs in RDMA-write support, while
//                           FI_OPT_EFA_EMULATED_WRITE still answers false (default: none)
//   NNF_EFA_RULES_REMOTE_WRITE_ERRORS  N: every Nth write with immediate data a CQ receives fails
//                           at the target: instead of its completion, an error entry with
//                           op_context NULL, flags FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE,
//                           data its immediate, err FI_EIO, prov_errno 0xefa0fe (the bytes may
//                           have landed); its initiator's completion is a success, as where an
//                           unsolicited write receive fails at the target (default 0: none)
//   NNF_EFA_RULES_INTERLEAVE_ERRORS  0: an error completion is read only once no success waits
//                           (the old order); default 1: with errors and successes waiting, each
//                           read gives -FI_EAVAIL with probability 1/2 (seeded), as the device
//                           completes them
//   NNF_EFA_RULES_HANDSHAKE_EAGAIN  K: an endpoint's first K transmit posts (sends, injects, RMA)
//                           to each destination but itself answer -FI_EAGAIN, or fewer where a
//                           message from that peer was received first on the endpoint's CQ
//                           (seen only with FI_SOURCE); default 2, 0 off. Counted per endpoint
//                           (getopt kOptEfaRulesHandshakeEagains)
//   NNF_EFA_RULES_FAIL_NIC  N: every RMA write posted on NIC N fails (error completion FI_EIO,
//                           prov_errno 0xefa0ff; an inject returns -FI_EIO), as over a broken link
//   NNF_EFA_RULES_FAIL_AFTER_OPS  n:K[:K2]: NIC n's link goes down once K transmit operations
//                           (sends, writes, reads, injects) were taken on it, and comes back once
//                           K2 more were posted on any NIC of the process (0 or absent: never);
//                           both move at the check of the next post, so the K-th completes
//   NNF_EFA_RULES_FAIL_AFTER_MS   n:T[:T2]: NIC n's link goes down T ms after the first transmit
//                           operation on it, and comes back T2 ms later (0 or absent: never)
//   NNF_EFA_RULES_FAIL_FILE path: the NICs the file names (numbers, comma or space separated)
//                           are down while it names them; read at most every millisecond. A
//                           number after an 's' ("s1") names a silent NIC instead: what goes
//                           through it is taken and never completes, until its initiator removes
//                           the target's address (fi_av_remove), which forgets it, or until
//                           NNF_EFA_RULES_SILENT_GIVE_UP_MS (1000) passed: then it fails as on a
//                           down link (link.cc; getopt kOptEfaRulesLinkWithheld /
//                           kOptEfaRulesLinkForgotten)
//                           While a link is down (link.cc), as EFA's initiators see a dead NIC: a
//                           transmit posted on it or to an endpoint on a NIC whose process sees it
//                           down is taken and completes in error (FI_ECONNABORTED, prov_errno 4124
//                           where the endpoint reached that peer before, else FI_EHOSTUNREACH, 15;
//                           an inject's error has op_context NULL), nothing reaching the target;
//                           a transmit taken before and read while down completes in error too,
//                           its bytes possibly landed; receives stay posted. Each process
//                           publishes its down NICs in NNF_EFA_RULES_ADDRESSES/health-<pid>; the
//                           target's NIC is known with several NICs. getopt
//                           kOptEfaRulesLinkDown / kOptEfaRulesLinkFailed read the state.
//   NNF_EFA_RULES_HOLD_NIC  n:ms (or n,m,...:ms): RMA writes with immediate data posted on NIC n
//                           complete at once at the initiator and reach the target ms later
//                           (held.cc), as a write that completes once sent (tcp) may still be on
//                           its way
//   NNF_EFA_RULES_HOLD_READS ms: every RMA read is handed to the base ms after it was posted
//                           (held.cc): the source is read then, and the completion follows, as
//                           on a busy NIC; a source reused before the completion shows
//   NNF_EFA_RULES_ADDRESSES directory where, with several NICs, endpoints publish which NIC
//                           their address belongs to (default /tmp/efa-rules-addresses-<uid>;
//                           addresses.cc)
//   NNF_EFA_RULES_STATS     file to append per-domain traffic to: "<domain> <bytes written by
//                           RMA> <bytes sent> <bytes read> <pid>" per domain name, totals so far,
//                           then "rules pid=<pid> <name>=<count> ...", the evidence that the
//                           rules were at work (efa_rules.h, Evidence), at domain close, at exit
//                           and on nnf_efa_rules_write_stats() (stats.cc)
//   NNF_EFA_RULES_REPORT    file to append one line "<rule> <detail>\n" per violation (read at
//                           each violation)
//   NCCL_FABRIC_CUDA_LIBRARY  the CUDA driver to ask about device pointers (the fake one in tests)
//   NCCL_PROTO              read at the first data transfer, for ll128-order
//
// Rules (each: report line, stderr "efa-rules: VIOLATION <rule>: <detail>", a process counter
// readable with getopt(kOptEfaRulesViolations), and an error completion with err FI_EINVAL and
// prov_errno 0xefa000 + rule number where the operation has a context; injects return -FI_EINVAL):
//   1 missing-descriptor    FI_MR_LOCAL in effect and a post of >0 bytes without a live MR
//                           descriptor that covers the buffer
//   2 inject-device-memory  an inject from memory registered as FI_HMEM_CUDA or that the CUDA
//                           driver calls device memory
//   3 option-after-enable   fi_setopt after fi_enable (also returns -FI_EOPBADSTATE)
//   4 tag-format            a tag (or tag|ignore) with bits outside mem_tag_format
//   5 cuda-api-permitted    fi_enable with FI_HMEM while FI_OPT_CUDA_API_PERMITTED is not false
//   6 shared-memory-read    an RMA read from our own address while
//                           FI_OPT_SHARED_MEMORY_PERMITTED is not false
//   7 ll128-order           first tagged send or RMA write (what carries LL128 lines) on an FI_HMEM
//                           endpoint without the in-order-128 option of its kind set to true while
//                           NCCL_PROTO lets NCCL run LL128 (once per endpoint)
//   8 dmabuf-range          a DMA-BUF registration whose base_addr + offset range is not device
//                           memory by the CUDA driver
//   9 wrong-domain          a post with a descriptor of an MR registered on another of our
//                           domains (another NIC) than the endpoint's, or fi_ep_bind of an AV or
//                           CQ of another domain (which returns -FI_EINVAL)
//  10 remote-key-domain     with several NICs, an RMA (read or write) whose remote key was
//                           registered on another NIC than the one of the target endpoint. Keys
//                           carry their NIC (mr.cc) and endpoints publish theirs (addresses.cc), so
//                           the check holds across processes; it needs keys we make, so a base
//                           with FI_MR_PROV_KEY (neither tcp nor shm) is not checked. Whether the
//                           key is live in the target process is not checked (no process sees
//                           another's registrations; the base refuses a dead key anyway).
//  11 mixed-hmem-iov        a write EFA emulates (above) with an iov of another memory type than
//                           desc[0]'s (host and device mixed, another GPU, or device memory
//                           behind a missing desc[0]): the provider would copy device memory
//                           with the CPU (or host memory as device memory)
//  12 cq-data-size          immediate data (a *data call, or FI_REMOTE_CQ_DATA) with bits above
//                           32: EFA carries 4 bytes
//  13 rma-size              a write with immediate data longer than 1 GiB: EFA cuts a write at
//                           min(1 GiB, max_rdma_size) and each piece completes at the target
//                           with the same immediate
#include <cstddef>

#include "efa_rules.h"

#if NNF_EFA_RULES_HAVE_FI_PROV_H
#include <rdma/providers/fi_prov.h>
#else
// Debian-style installs without the provider header: the same layout, pinned below.
extern "C" struct fi_provider {
  uint32_t version;
  uint32_t fi_version;
  struct fi_context context;
  const char* name;
  int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const struct fi_info* hints, struct fi_info** info);
  int (*fabric)(struct fi_fabric_attr* attr, struct fid_fabric** fabric, void* context);
  void (*cleanup)(void);
};
#endif

static_assert(sizeof(fi_provider) == 72, "fi_provider layout");
static_assert(offsetof(fi_provider, fi_version) == 4, "fi_provider layout");
static_assert(offsetof(fi_provider, context) == 8, "fi_provider layout");
static_assert(offsetof(fi_provider, name) == 40, "fi_provider layout");
static_assert(offsetof(fi_provider, getinfo) == 48, "fi_provider layout");
static_assert(offsetof(fi_provider, fabric) == 56, "fi_provider layout");
static_assert(offsetof(fi_provider, cleanup) == 64, "fi_provider layout");

namespace {

void cleanup() {}

fi_provider makeProvider() {
  fi_provider provider{};
  provider.version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  provider.fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
  provider.name = "efa";
  provider.getinfo = efa_rules::getinfo;
  provider.fabric = efa_rules::openFabric;
  provider.cleanup = cleanup;
  return provider;
}

fi_provider g_provider = makeProvider();

}  // namespace

// The core calls this once at load; it must not call back into libfabric.
extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini(void) {
  return &g_provider;
}
