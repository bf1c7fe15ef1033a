// What the processes of one namespace share, in files under /dev/shm: the registry (devices,
// queue pairs, memory regions, files) and, per queue pair and per completion queue, a ring.
// A peer process reaches another's receive queue and completion queue through these rings and its
// memory through process_vm_readv/writev, so the target's CPU takes no part in a transfer.
#pragma once

#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "config.h"

namespace nnf::softefa {

// A process-shared mutex that survives its holder's death (tests kill peers on purpose).
struct SharedLock {
  pthread_mutex_t mutex;
  void init();
  void lock();
  void unlock() { pthread_mutex_unlock(&mutex); }
};

class LockGuard {
 public:
  explicit LockGuard(SharedLock& lock) : lock_(lock) { lock_.lock(); }
  ~LockGuard() { lock_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  SharedLock& lock_;
};

struct DeviceSlot {
  uint32_t used;
  char pci[16];  // "0000:4f:00.0"
};

// QpSlot::flags
constexpr uint32_t kQpReady = 1;        // RTR or RTS: it takes traffic
constexpr uint32_t kQpUnsolicited = 2;  // writes with immediate data consume no receive

struct QpSlot {
  uint32_t live;
  int32_t pid;
  uint32_t qkey;
  uint32_t pd;
  uint32_t flags;
  uint32_t pad;
  uint64_t fileId;    // its receive ring
  uint64_t recvCqId;  // the completion ring of its receive completions
};

struct MrSlot {
  uint16_t gen;  // part of the key: a stale key names another generation
  uint16_t live;
  int32_t pid;
  uint32_t device;
  uint32_t pd;
  uint32_t access;  // IBV_ACCESS_*
  uint32_t pad;
  uint64_t iova;  // the key's address range starts here
  uint64_t length;
  uint64_t alias;  // where the owner's CPU reaches iova (another mapping for GPU memory)
};

struct FileSlot {
  uint64_t id;  // 0: free
  int32_t pid;
  uint32_t pad;
};

constexpr uint32_t kMaxFiles = 4096;

struct LinkVoter {
  int32_t pid;     // 0: free
  uint32_t slots;  // the device slots it votes down (bit per slot)
  // The device slots down for this process alone (its own NIC as its peers see it, while the
  // host's other processes keep theirs: a peer host's NIC, in a test of one host).
  uint32_t ownSlots;
  // The device slots silent for this process alone: what goes to or from its queue pairs there
  // neither lands nor fails until the link speaks again ("s<n>" in FILE.<pid>, link.cc).
  uint32_t ownSilentSlots;
};

constexpr uint32_t kMaxLinkVoters = 256;

struct Registry {
  uint64_t magic;
  SharedLock lock;
  uint64_t nextId;
  uint32_t mrHint;
  uint32_t fileHint;
  DeviceSlot devices[kMaxDevices];
  QpSlot qps[kMaxDevices][kMaxQp];
  MrSlot mrs[kMaxMr];
  FileSlot files[kMaxFiles];
  // Per device slot, how many processes see its link down (link.cc): the NIC is shared by the
  // processes of the namespace, as a host's NIC is by its ranks.
  std::atomic<uint32_t> linkDownVotes[kMaxDevices];
  // Who votes which slots down (under lock): a process that ends without taking its votes back
  // (a test's peer exits with the link down) loses them when the next process opens a device.
  LinkVoter linkVoters[kMaxLinkVoters];
  // Voters whose ownSlots or ownSilentSlots are not empty (0: no process sees a NIC down or silent
  // for itself alone).
  std::atomic<uint32_t> ownDownVoters;
};

// One posted receive.
struct RqEntry {
  uint64_t wrId;
  uint32_t numSge;
  uint32_t pad;
  ibv_sge sge[kMaxRqSge];
};

// A queue pair's receive ring: the owner posts at tail, senders take at head under the lock.
struct QpRing {
  uint64_t magic;
  SharedLock lock;
  uint32_t capacity;  // a power of two
  std::atomic<uint32_t> head;
  std::atomic<uint32_t> tail;
  std::atomic<uint32_t> live;
  int32_t pid;
  uint32_t pad;
  RqEntry ring[1];
};

// Cqe::flags
constexpr uint32_t kCqeImm = 1;
constexpr uint32_t kCqeUnsolicited = 2;
constexpr uint32_t kCqeRecv = 4;  // from the receive queue (else the send queue)

// One completion, as the device writes it; the opcode is the ibv_wc_opcode rdma-core reports.
struct Cqe {
  uint64_t wrId;
  uint32_t vendorErr;  // EFA's completion status (efa_io_comp_status)
  uint32_t opcode;
  uint32_t byteLen;
  uint32_t imm;  // as the sender passed it (__be32)
  uint32_t qpNum;
  uint32_t srcQp;
  uint32_t flags;
  uint32_t pad;
  uint8_t sgid[16];
};

// A completion queue's ring: any process pushes at tail under the lock, the owner pops at head.
struct CqRing {
  uint64_t magic;
  SharedLock lock;
  uint32_t capacity;  // a power of two
  std::atomic<uint32_t> head;
  std::atomic<uint32_t> tail;
  std::atomic<uint32_t> live;
  int32_t pid;
  uint32_t pad;
  Cqe ring[1];
};

// The registry of this process's namespace, created by the first process that needs it.
Registry& registry();
// A fresh id for a file, PD or CQ, unique in the namespace for its lifetime.
uint64_t newId();
// Creates (owner) or maps (peer) the shared file `id`; nullptr with errno set on failure. A
// created file is listed with this process as its owner, so that a later process removes it
// once this one has died.
void* createShared(uint64_t id, size_t size);
void* openShared(uint64_t id, size_t* size);
void removeShared(uint64_t id, void* base, size_t size);
// Whether `pid` is a live process (not gone, not a zombie).
bool processAlive(int pid);

// Pushes one completion; false when the ring is full or gone.
bool pushCqe(CqRing* ring, const Cqe& cqe);

size_t qpRingSize(uint32_t capacity);
size_t cqRingSize(uint32_t capacity);
constexpr uint64_t kQpRingMagic = 0x51505249u;  // "QPRI"
constexpr uint64_t kCqRingMagic = 0x43515249u;  // "CQRI"

}  // namespace nnf::softefa
