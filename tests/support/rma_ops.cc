#include "support/rma_ops.h"

#include <sched.h>

#include <chrono>
#include <string>
#include <thread>

#include "rma_loader.h"
#include "support/plugin_ops.h"

namespace nnf::test {

void idle(uint64_t* spins) {
  if (++*spins < 64) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void openRma(RankPeer& peer, Rma* rma, bool* skip) {
  *skip = false;
  std::string why;
  int version = 0;
  try {
    version = tools::rmaVersionFromEnv("NNF_TEST_RMA_ABI");
  } catch (const std::exception& error) {
    FAIL() << error.what();
  }
  rma->table = tools::findRma(peer.library->handle(), version, tools::RmaLookup::kNccl231,
                              &rma->version, &why);
  ASSERT_NE(rma->table, nullptr) << why;
  ASSERT_EQ(rma->table->init(&rma->instance, 0x5eed0001, testLogger), abi::kSuccess);
  ASSERT_EQ(rma->table->devices(&rma->devices), abi::kSuccess);
  if (rma->devices == 0) {
    *skip = true;
    return;
  }
  ASSERT_EQ(rma->devices, peer.ndev) << "RMA runs on the net plugin's devices";
  ASSERT_EQ(rma->table->getProperties(peer.dev, &rma->props), abi::kSuccess);
}

void connectRma(RankPeer& peer, Rma* rma, int contexts) {
  char handle[abi::kHandleMaxSize] = {};
  void* listen = nullptr;
  ASSERT_EQ(rma->table->listen(rma->instance, peer.dev, handle, &listen), abi::kSuccess);
  ASSERT_NE(listen, nullptr);
  std::vector<char> all(static_cast<size_t>(peer.nranks) * abi::kHandleMaxSize);
  ASSERT_TRUE(peer.allGather(handle, sizeof(handle), all.data()));
  std::vector<void*> handles(static_cast<size_t>(peer.nranks));
  for (int r = 0; r < peer.nranks; ++r) {
    handles[static_cast<size_t>(r)] = all.data() + static_cast<size_t>(r) * abi::kHandleMaxSize;
  }
  // NCCL 2.30 hands connect its net plugin's context, not the RMA one: the plugin must not care.
  int netContext = 0;
  ASSERT_EQ(
      rma->table->connect(&netContext, handles.data(), peer.nranks, peer.rank, listen, &rma->coll),
      abi::kSuccess);
  ASSERT_NE(rma->coll, nullptr);
  ASSERT_EQ(rma->table->closeListen(listen), abi::kSuccess);
  abi::RmaConfigV15 config{contexts, abi::kTrafficClassUndef, 1};
  ASSERT_EQ(rma->table->createContext(rma->coll, &config, &rma->ctx), abi::kSuccess);
  ASSERT_NE(rma->ctx, nullptr);
}

void closeRma(RankPeer& peer, Rma* rma) {
  if (rma->ctx != nullptr) {
    EXPECT_EQ(rma->table->destroyContext(rma->ctx), abi::kSuccess);
  }
  if (rma->coll != nullptr) {
    EXPECT_EQ(rma->table->closeColl(rma->coll), abi::kSuccess);
  }
  if (rma->instance != nullptr) {
    EXPECT_EQ(rma->table->finalize(rma->instance), abi::kSuccess);
  }
  rma->ctx = rma->coll = rma->instance = nullptr;
}

void regWindow(Rma& rma, void* data, size_t size, int type, uint64_t flags, void** mhandle) {
  ASSERT_EQ(rma.table->regMrSym(rma.coll, data, size, type, flags, mhandle), abi::kSuccess);
  ASSERT_NE(*mhandle, nullptr);
}

void deregWindow(Rma& rma, void* mhandle) {
  ASSERT_EQ(rma.table->deregMrSym(rma.coll, mhandle), abi::kSuccess);
}

abi::Result pollRma(Rma& rma, void* request, double timeoutSec) {
  Deadline deadline(timeoutSec);
  uint64_t spins = 0;
  for (;;) {
    int done = 0;
    abi::Result result = rma.table->test(rma.coll, request, &done);
    if (result != abi::kSuccess || done) return result;
    if (deadline.expired()) {
      ADD_FAILURE() << "an RMA request did not complete within " << timeoutSec << " s";
      return abi::kInternalError;
    }
    rma.table->rmaProgress(rma.ctx);
    idle(&spins);
  }
}

void waitRma(Rma& rma, void* request) {
  ASSERT_NE(request, nullptr);
  ASSERT_EQ(pollRma(rma, request), abi::kSuccess);
}

void waitWord(Rma& rma, const uint64_t* word, uint64_t value) {
  Deadline deadline(kRmaTimeoutSec);
  uint64_t spins = 0;
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value) {
    ASSERT_FALSE(deadline.expired())
        << "signal word at " << word << " stays at " << __atomic_load_n(word, __ATOMIC_ACQUIRE)
        << ", waiting for " << value;
    ASSERT_EQ(rma.table->rmaProgress(rma.ctx), abi::kSuccess);
    idle(&spins);
  }
}

}  // namespace nnf::test
