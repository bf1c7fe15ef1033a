#include "shared.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace nnf::softefa {
namespace {

// The layout's version is in the magic: a process of another build never reads a registry it
// does not understand (it would open its own, under another name).
constexpr uint64_t kRegistryMagic = 0x4e4e46534546410full;  // "NNFSEFA" + layout 15

std::string sharedName(const std::string& what) {
  return "/nnf-soft-efa-" + config().ns + "-" + what;
}

std::string fileName(uint64_t id) {
  return sharedName(std::to_string(id));
}

Registry* mapRegistry() {
  std::string name = sharedName("registry-" + std::to_string(kRegistryMagic & 0xff));
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "soft-efa: cannot open %s: %s\n", name.c_str(), std::strerror(errno));
    std::abort();
  }
  // The first process sizes and initialises it; the file lock keeps the others out meanwhile.
  flock(fd, LOCK_EX);
  struct stat info;
  fstat(fd, &info);
  bool fresh = static_cast<size_t>(info.st_size) < sizeof(Registry);
  if (fresh && ftruncate(fd, sizeof(Registry)) != 0) {
    std::fprintf(stderr, "soft-efa: cannot size %s: %s\n", name.c_str(), std::strerror(errno));
    std::abort();
  }
  void* base = mmap(nullptr, sizeof(Registry), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    std::fprintf(stderr, "soft-efa: cannot map %s: %s\n", name.c_str(), std::strerror(errno));
    std::abort();
  }
  auto* reg = static_cast<Registry*>(base);
  if (fresh || reg->magic != kRegistryMagic) {
    // A new file is all zeroes; one of an older layout is never this name (see kRegistryMagic).
    reg->lock.init();
    reg->nextId = 1;
    reg->magic = kRegistryMagic;
  }
  flock(fd, LOCK_UN);
  close(fd);
  return reg;
}

// Frees the file slots (and removes the files) of processes that have died; once per process
// at its first use of the registry, and whenever the table is full.
void reapDeadFiles(Registry& reg);

void reapDeadFiles(Registry& reg) {
  for (FileSlot& slot : reg.files) {
    if (slot.id == 0 || processAlive(slot.pid)) continue;
    shm_unlink(fileName(slot.id).c_str());
    slot.id = 0;
  }
}

bool listFile(uint64_t id) {
  Registry& reg = registry();
  LockGuard guard(reg.lock);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < kMaxFiles; ++i) {
      FileSlot& slot = reg.files[(reg.fileHint + i) % kMaxFiles];
      if (slot.id != 0) continue;
      slot.id = id;
      slot.pid = getpid();
      reg.fileHint = (reg.fileHint + i + 1) % kMaxFiles;
      return true;
    }
    reapDeadFiles(reg);
  }
  return false;
}

void unlistFile(uint64_t id) {
  Registry& reg = registry();
  LockGuard guard(reg.lock);
  for (FileSlot& slot : reg.files)
    if (slot.id == id) slot.id = 0;
}

}  // namespace

void SharedLock::init() {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&mutex, &attr);
  pthread_mutexattr_destroy(&attr);
}

void SharedLock::lock() {
  int rc = pthread_mutex_lock(&mutex);
  // Its holder died: what it guarded is a ring index or a table slot, each written before it is
  // published, so the state is usable as it is.
  if (rc == EOWNERDEAD) pthread_mutex_consistent(&mutex);
}

Registry& registry() {
  static Registry* reg = [] {
    Registry* mapped = mapRegistry();
    LockGuard guard(mapped->lock);
    reapDeadFiles(*mapped);
    return mapped;
  }();
  return *reg;
}

uint64_t newId() {
  Registry& reg = registry();
  LockGuard guard(reg.lock);
  return reg.nextId++;
}

void* createShared(uint64_t id, size_t size) {
  std::string name = fileName(id);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int saved = errno;
    close(fd);
    shm_unlink(name.c_str());
    errno = saved;
    return nullptr;
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED || !listFile(id)) {
    if (base != MAP_FAILED) munmap(base, size);
    shm_unlink(name.c_str());
    errno = ENOMEM;
    return nullptr;
  }
  return base;
}

void* openShared(uint64_t id, size_t* size) {
  int fd = shm_open(fileName(id).c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  struct stat info;
  if (fstat(fd, &info) != 0 || info.st_size == 0) {
    close(fd);
    errno = ENOENT;
    return nullptr;
  }
  *size = static_cast<size_t>(info.st_size);
  void* base = mmap(nullptr, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return base == MAP_FAILED ? nullptr : base;
}

void removeShared(uint64_t id, void* base, size_t size) {
  shm_unlink(fileName(id).c_str());
  unlistFile(id);
  if (base != nullptr) munmap(base, size);
}

bool processAlive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A killed child its parent has not reaped yet still answers kill(): its state says Z.
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* file = std::fopen(path, "re");
  if (file == nullptr) return false;
  char state = '?';
  int scanned = std::fscanf(file, "%*d (%*[^)]) %c", &state);
  std::fclose(file);
  return scanned == 1 && state != 'Z' && state != 'X';
}

bool pushCqe(CqRing* ring, const Cqe& cqe) {
  LockGuard guard(ring->lock);
  if (ring->live.load(std::memory_order_acquire) == 0) return false;
  uint32_t tail = ring->tail.load(std::memory_order_relaxed);
  if (tail - ring->head.load(std::memory_order_acquire) >= ring->capacity) return false;
  ring->ring[tail & (ring->capacity - 1)] = cqe;
  ring->tail.store(tail + 1, std::memory_order_release);
  return true;
}

size_t qpRingSize(uint32_t capacity) {
  return offsetof(QpRing, ring) + sizeof(RqEntry) * capacity;
}

size_t cqRingSize(uint32_t capacity) {
  return offsetof(CqRing, ring) + sizeof(Cqe) * capacity;
}

}  // namespace nnf::softefa
