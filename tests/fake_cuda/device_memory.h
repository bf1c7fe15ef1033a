// The fake CUDA driver's device memory: ranges of the address space it calls device memory of an
// ordinal. Two kinds:
//   declared: host memory a test names device memory (nnfFakeCudaDeclare); the CPU reaches it;
//   allocated: cuMemAlloc/cudaMalloc memory. By default host memory too; with
//     NNF_FAKE_CUDA_NO_CPU_ACCESS=1 (or nnfFakeCudaSetNoCpuAccess(1)) a memfd mapped without
//     access at the address the program sees, so that any CPU read or write of it faults, plus a
//     second mapping of the same memfd (the alias) that only the fake's copies and fills and the
//     software EFA device (tests/soft_efa, through nnfFakeCudaHostAlias) use: a NIC's view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace nnf::fakecuda {

struct Range {
  uintptr_t start;
  uintptr_t end;
  int ordinal;
  uintptr_t alias;  // 0: the CPU reaches start itself
  int memfd;        // -1 unless allocated without CPU access
  bool allocated;   // from an allocation call (freed with it), not declared
};

extern std::mutex g_mutex;

void declare(void* base, size_t length, int ordinal);
void reset();
void setNoCpuAccess(bool on);
// Allocates `size` bytes of device memory of ordinal 0; nullptr when it cannot.
void* allocate(size_t size);
// Frees an allocation by its start; false when `pointer` starts none.
bool release(uintptr_t pointer);
// The range holding `address`, copied out; false when none does.
bool find(uintptr_t address, Range* range);
// Where the CPU reaches [address, address+size): the alias for memory without CPU access, the
// address itself for declared or host memory; 0 when the span leaves the range it starts in.
uintptr_t cpuAddress(uintptr_t address, size_t size);
// A DMA-BUF for [pointer, pointer+size) of an allocation without CPU access: a descriptor of
// its memfd, whose start within the memfd is remembered for nnfFakeCudaDmaBufStart. -1 when
// the range is not such memory.
int exportDmaBuf(uintptr_t pointer, size_t size);
bool dmaBufStart(int fd, uint64_t* start);

}  // namespace nnf::fakecuda
