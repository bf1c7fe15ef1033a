#include "device_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace nnf::fakecuda {

std::mutex g_mutex;

namespace {

std::vector<Range> g_ranges;
int g_noCpuAccess = -1;  // -1: from the environment at the next allocation

struct Export {
  int fd;
  dev_t device;
  ino_t inode;
  uint64_t start;
};
std::vector<Export> g_exports;

const Range* findLocked(uintptr_t address) {
  for (const Range& range : g_ranges)
    if (address >= range.start && address < range.end) return &range;
  return nullptr;
}

bool noCpuAccessLocked() {
  if (g_noCpuAccess < 0) {
    const char* env = std::getenv("NNF_FAKE_CUDA_NO_CPU_ACCESS");
    g_noCpuAccess = env != nullptr && std::strcmp(env, "0") != 0 && *env != '\0';
  }
  return g_noCpuAccess == 1;
}

void* allocateWithoutCpuAccess(size_t rounded) {
  int fd = memfd_create("nnf-fake-gpu", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    close(fd);
    return nullptr;
  }
  void* alias = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* visible = mmap(nullptr, rounded, PROT_NONE, MAP_SHARED, fd, 0);
  if (alias == MAP_FAILED || visible == MAP_FAILED) {
    if (alias != MAP_FAILED) munmap(alias, rounded);
    if (visible != MAP_FAILED) munmap(visible, rounded);
    close(fd);
    return nullptr;
  }
  auto start = reinterpret_cast<uintptr_t>(visible);
  g_ranges.push_back({start, start + rounded, 0, reinterpret_cast<uintptr_t>(alias), fd, true});
  return visible;
}

}  // namespace

void declare(void* base, size_t length, int ordinal) {
  std::lock_guard<std::mutex> guard(g_mutex);
  auto start = reinterpret_cast<uintptr_t>(base);
  g_ranges.push_back({start, start + length, ordinal, 0, -1, false});
}

void reset() {
  std::lock_guard<std::mutex> guard(g_mutex);
  // Declared ranges are forgotten; allocations stay valid (their owners free them).
  g_ranges.erase(std::remove_if(g_ranges.begin(), g_ranges.end(),
                                [](const Range& range) { return !range.allocated; }),
                 g_ranges.end());
  g_noCpuAccess = -1;
}

void setNoCpuAccess(bool on) {
  std::lock_guard<std::mutex> guard(g_mutex);
  g_noCpuAccess = on ? 1 : 0;
}

void* allocate(size_t size) {
  size_t rounded = (size + 4095) / 4096 * 4096;
  std::lock_guard<std::mutex> guard(g_mutex);
  if (noCpuAccessLocked()) return allocateWithoutCpuAccess(rounded);
  void* memory = std::aligned_alloc(4096, rounded);
  if (memory == nullptr) return nullptr;
  auto start = reinterpret_cast<uintptr_t>(memory);
  g_ranges.push_back({start, start + rounded, 0, 0, -1, true});
  return memory;
}

bool release(uintptr_t pointer) {
  std::lock_guard<std::mutex> guard(g_mutex);
  auto found = std::find_if(g_ranges.begin(), g_ranges.end(),
                            [pointer](const Range& range) { return range.start == pointer; });
  if (found == g_ranges.end()) return false;
  Range range = *found;
  g_ranges.erase(found);
  if (range.memfd >= 0) {
    size_t length = range.end - range.start;
    munmap(reinterpret_cast<void*>(range.start), length);
    munmap(reinterpret_cast<void*>(range.alias), length);
    close(range.memfd);
  } else if (range.allocated) {
    std::free(reinterpret_cast<void*>(range.start));
  }
  return true;
}

bool find(uintptr_t address, Range* range) {
  std::lock_guard<std::mutex> guard(g_mutex);
  const Range* found = findLocked(address);
  if (found == nullptr) return false;
  *range = *found;
  return true;
}

uintptr_t cpuAddress(uintptr_t address, size_t size) {
  std::lock_guard<std::mutex> guard(g_mutex);
  const Range* range = findLocked(address);
  if (range == nullptr) return address;  // host memory
  if (size > range->end - address) return 0;
  return range->alias != 0 ? range->alias + (address - range->start) : address;
}

int exportDmaBuf(uintptr_t pointer, size_t size) {
  std::lock_guard<std::mutex> guard(g_mutex);
  const Range* range = findLocked(pointer);
  if (range == nullptr || range->memfd < 0 || size > range->end - pointer) return -1;
  int fd = fcntl(range->memfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct stat info;
  fstat(fd, &info);
  // A descriptor number is reused once closed: the newest export of a number is the one.
  g_exports.erase(std::remove_if(g_exports.begin(), g_exports.end(),
                                 [fd](const Export& e) { return e.fd == fd; }),
                  g_exports.end());
  g_exports.push_back({fd, info.st_dev, info.st_ino, pointer - range->start});
  return fd;
}

bool dmaBufStart(int fd, uint64_t* start) {
  struct stat info;
  if (fstat(fd, &info) != 0) return false;
  std::lock_guard<std::mutex> guard(g_mutex);
  for (const Export& e : g_exports) {
    if (e.fd != fd || e.device != info.st_dev || e.inode != info.st_ino) continue;
    *start = e.start;
    return true;
  }
  return false;
}

}  // namespace nnf::fakecuda
