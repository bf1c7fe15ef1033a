// NCCL's way of driving the RMA plugin, as gtest helpers for collective tests (runRanks): the
// loader's table (newest first, or NNF_TEST_RMA_ABI), listen, the all-gather of handles, the
// collective connect (handed a context that is not the RMA one, as NCCL 2.30 does), windows,
// and requests tested until done. Every wait has a deadline and yields the CPU, since the ranks
// of a test may share two cores. Helpers returning void report fatal failures: call them through
// ASSERT_NO_FATAL_FAILURE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nccl_rma/rma.h"
#include "support/harness.h"

namespace nnf::test {

constexpr double kRmaTimeoutSec = 120;

struct Rma {
  const abi::RmaV15* table = nullptr;
  int version = 0;
  void* instance = nullptr;  // init's context
  void* coll = nullptr;
  void* ctx = nullptr;  // createContext's
  int devices = 0;
  abi::PropertiesV12 props{};
};

// Finds the table (NNF_TEST_RMA_ABI, else the newest NCCL 2.31 looks for) and calls init,
// devices and getProperties. Skips the test (GTEST_SKIP in the caller) when the device offers no
// RMA: *skip says so.
void openRma(RankPeer& peer, Rma* rma, bool* skip);
// listen, all-gather, connect, closeListen, createContext (`contexts` streams).
void connectRma(RankPeer& peer, Rma* rma, int contexts = 1);
void closeRma(RankPeer& peer, Rma* rma);

void regWindow(Rma& rma, void* data, size_t size, int type, uint64_t flags, void** mhandle);
void deregWindow(Rma& rma, void* mhandle);

// A request tested until done (rmaProgress between tests); a failure or timeout fails.
void waitRma(Rma& rma, void* request);
// The result of testing `request` until it is done or fails (timeout: a gtest failure).
abi::Result pollRma(Rma& rma, void* request, double timeoutSec = kRmaTimeoutSec);
// rmaProgress until `*word` (host memory, read with acquire) reaches `value`.
void waitWord(Rma& rma, const uint64_t* word, uint64_t value);
// Lets the other processes run when a poll found nothing to do.
void idle(uint64_t* spins);

}  // namespace nnf::test
