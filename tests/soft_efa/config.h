// The software EFA device's settings, read once from the environment (docs/efa.md lists them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nnf::softefa {

struct Config {
  // NNF_SOFT_EFA_NICS: how many devices (0..32, default 1); NNF_SOFT_EFA_PCI: their PCI
  // addresses, comma-separated (default: the first NICS EFA addresses of a p5.48xlarge, whose
  // first four share GPU 0's PCIe switch).
  std::vector<std::string> pci;
  // NNF_SOFT_EFA_DEVICE_ID: the vendor part id (default 0xefa1, the generation of a p5).
  uint32_t deviceId = 0xefa1;
  // Capabilities efadv_query_device reports (NNF_SOFT_EFA_NO_RDMA_WRITE=1 drops RDMA write, as
  // older generations lack it; NNF_SOFT_EFA_NO_UNSOLICITED=1 drops unsolicited write receive).
  bool rdmaRead = true;
  bool rdmaWrite = true;
  bool unsolicitedWrite = true;
  // NNF_SOFT_EFA_MAX_RDMA_SIZE (default 1 GiB, as EFA).
  uint32_t maxRdmaSize = 1u << 30;
  // NNF_SOFT_EFA_IN_ORDER_128 (default 1, as a p5's NICs): QPs report 128-byte aligned in-order
  // data (ibv_query_qp_data_in_order), so the provider grants the SENDRECV and WRITE ordering
  // options; the pieces of a write then land in address order. 0: refused, as on a p5en.
  bool inOrder128 = true;
  // NNF_SOFT_EFA_REORDER (default 1): operations of a queue pair complete in a seeded random
  // order, after random delays, and a large write or read lands in pieces in random order.
  // NNF_SOFT_EFA_SEED seeds it (default 1; each process mixes in its pid).
  bool reorder = true;
  uint64_t seed = 1;
  // NNF_SOFT_EFA_NS: the namespace of the shared tables (processes in one namespace reach each
  // other's devices); default "u<uid>".
  std::string ns;
  // NNF_SOFT_EFA_SYSFS: where the device's sysfs tree is written (default /tmp/nnf-soft-efa-<ns>);
  // SYSFS_PATH is set to it for libfabric's efa provider unless already set.
  std::string sysfs;
  // NNF_SOFT_EFA_RNR_INTERVAL_US: the wait between two tries of a send that found no receive
  // posted (default 100).
  uint32_t rnrIntervalUs = 100;
  // NNF_SOFT_EFA_FORK=disabled: ibv_is_fork_initialized answers IBV_FORK_DISABLED until
  // ibv_fork_init; default "unneeded", as rdma-core on kernels with copy-on-fork for pinned pages.
  bool forkUnneeded = true;
  // NNF_SOFT_EFA_FAIL_NIC=n: NIC n's link is broken: every RDMA write posted on it fails
  // (unreachable remote), for tests of a failing rail; -1 (default): none.
  int failNic = -1;
  // Links that go down in the middle of a run and come back (link.cc). NIC n is down while:
  // NNF_SOFT_EFA_FAIL_AFTER_OPS=n:K[:K2]: K send-queue operations of this process were posted on
  // it, until K2 more were posted on any NIC (absent or 0: for good), the post after the K-th
  // (K2-th) finding the change; NNF_SOFT_EFA_FAIL_AFTER_MS
  // =n:T[:T2]: T ms after this process's first operation on it, for T2 ms;
  // NNF_SOFT_EFA_FAIL_FILE=path: the file names n (numbers, comma or space separated).
  struct LinkSchedule {
    int nic = -1;  // -1: none
    uint64_t after = 0;
    uint64_t restoreAfter = 0;  // 0: never
  };
  LinkSchedule failAfterOps;
  LinkSchedule failAfterMs;
  // NNF_SOFT_EFA_SILENT_GIVE_UP_MS: how long an operation waits on a silent link ("s<n>" in
  // FILE.<pid>) before it fails as unresponsive remote, as SRD gives up once its retries ran out
  // (default 1000).
  uint64_t silentGiveUpMs = 1000;
  std::string failFile;
  // NNF_SOFT_EFA_STATS: a file receiving this process's traffic per device at exit and on
  // nnf_soft_efa_write_stats() ("<device> <written> <sent> <read> <pid>" lines).
  std::string stats;
};

// Read on first use; the same for the life of the process.
const Config& config();

// Device limits (EFA-like values; efadv_query_device and ibv_query_device report them).
constexpr uint32_t kMaxDevices = 32;
constexpr uint32_t kMaxQp = 256;  // per device; QP numbers are 1..255 (EFA's are 16 bits)
constexpr uint32_t kMaxSqWr = 4096;
constexpr uint32_t kMaxRqWr = 8192;  // the efa provider posts at most 8192 receives at once
constexpr uint32_t kMaxSqSge = 2;
constexpr uint32_t kMaxRqSge = 1;
constexpr uint32_t kMaxRdmaSge = 1;
constexpr uint32_t kInlineSize = 32;
constexpr uint32_t kMtu = 8928;  // max_msg_sz of a send
constexpr uint32_t kMaxCqe = 1u << 20;
constexpr uint32_t kMaxCq = 1024;
constexpr uint32_t kMaxMr = 1u << 16;
constexpr uint32_t kMaxPd = 1024;
constexpr uint32_t kMaxAh = 4096;
constexpr uint16_t kUnknownAh = 0xffff;  // a completion's slid when the sender has no AH here
constexpr uint8_t kInfiniteRnrRetry = 7;

}  // namespace nnf::softefa
