#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "core/request.h"
#include "core/sequence_table.h"

namespace nnf::core {
namespace {

TEST(RequestPool, HandsOutEachRequestOnceUntilReleased) {
  OpPool ops(4);
  RequestPool pool(nullptr, 40, &ops);
  std::set<Request*> seen;
  for (int i = 0; i < 40; ++i) {
    Request* request = pool.acquire(3);
    ASSERT_NE(request, nullptr);
    EXPECT_TRUE(seen.insert(request).second);
    EXPECT_EQ(request->state, Request::State::kActive);
    EXPECT_EQ(request->count, 3);
    EXPECT_EQ(request->remaining, 3);
    EXPECT_TRUE(pool.owns(request));
  }
  EXPECT_EQ(pool.acquire(1), nullptr);  // the 41st: NCCL must retry
  EXPECT_EQ(pool.inUse(), 40u);
  Request* back = *seen.begin();
  back->postedNs = 12345;  // stamped by a stall check during its previous life
  back->error = abi::kRemoteError;
  pool.release(back);
  EXPECT_EQ(back->state, Request::State::kFree);
  EXPECT_EQ(back->ops, nullptr) << "a free request holds no operations";
  EXPECT_EQ(pool.acquire(1), back);
  // A reused request starts clean: its wait is timed afresh.
  EXPECT_EQ(back->postedNs, 0u);
  EXPECT_EQ(back->error, abi::kSuccess);
}

TEST(RequestPool, AnIdleCommHoldsNothingAndOperationsFollowWhatIsInFlight) {
  OpPool ops(8, 4);
  RequestPool idle(nullptr, 32, &ops);
  EXPECT_EQ(idle.inUse(), 0u);
  EXPECT_EQ(ops.blocksAllocated(), 0u) << "no operation before the first request";
  RequestPool a(nullptr, 32, &ops), b(nullptr, 32, &ops);
  Request* first = a.acquire(8);
  Request* second = b.acquire(2);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(ops.blocksAllocated(), 4u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(first->ops[i].request, first);
    EXPECT_EQ(first->ops[i].index, i);
  }
  EXPECT_EQ(second->ops[1].request, second);
  // Blocks of different requests never alias.
  EXPECT_TRUE(second->ops >= first->ops + 8 || second->ops + 8 <= first->ops);
  // Released blocks are reused: a steady stream allocates nothing more.
  for (int round = 0; round < 100; ++round) {
    a.release(first);
    first = a.acquire(8);
    ASSERT_NE(first, nullptr);
  }
  EXPECT_EQ(ops.blocksAllocated(), 4u);
}

TEST(RequestPool, SingleOperationRequestsCarryTheirOwn) {
  RequestPool pool(nullptr, 40, nullptr);
  std::set<Operation*> seen;
  for (int i = 0; i < 40; ++i) {
    Request* request = pool.acquire(1);
    ASSERT_NE(request, nullptr);
    ASSERT_NE(request->ops, nullptr);
    EXPECT_EQ(request->ops[0].request, request);
    EXPECT_EQ(request->ops[0].index, 0);
    EXPECT_TRUE(seen.insert(request->ops).second) << "operations never alias";
  }
  EXPECT_EQ(pool.acquire(1), nullptr);
  int visited = 0;
  pool.forEach([&](Request& request) { visited += request.state == Request::State::kActive; });
  EXPECT_EQ(visited, 40);
}

TEST(RequestPool, OperationContextIsFirstMember) {
  Operation op;
  EXPECT_EQ(Operation::fromContext(&op.context), &op);
}

TEST(SequenceTable, CountsPerTag) {
  SequenceTable table(8);
  EXPECT_EQ(table.next(5), 0);
  EXPECT_EQ(table.next(5), 1);
  EXPECT_EQ(table.next(-3), 0);
  EXPECT_EQ(table.next(5), 2);
  EXPECT_EQ(table.next(-3), 1);
  EXPECT_EQ(table.next(0), 0);
}

TEST(SequenceTable, ReportsFullTable) {
  SequenceTable table(4);
  for (int tag = 0; tag < 4; ++tag) EXPECT_EQ(table.next(tag * 1000), 0);
  EXPECT_EQ(table.next(999), -1);
  EXPECT_EQ(table.next(2000), 1);  // known tags keep working
}

TEST(SequenceTable, GrowsFromSmallToItsCapacityKeepingCounts) {
  SequenceTable table(256);
  for (int round = 0; round < 2; ++round) {
    for (int tag = 0; tag < 256; ++tag) EXPECT_EQ(table.next(tag * 7919), round) << tag;
  }
  EXPECT_EQ(table.next(-1), -1) << "a 257th tag";
}

TEST(SequenceTable, RunsOfOneTagAcrossGrowthKeepCounting) {
  // next() answers a repeated tag from the slot it used last; growing moves every slot.
  SequenceTable table(64, 2);
  std::vector<int64_t> expected(40, 0);
  for (int tag = 0; tag < 40; ++tag) {
    for (int run = 0; run < 3; ++run) EXPECT_EQ(table.next(tag), expected[tag]++) << tag;
    EXPECT_EQ(table.next(0), expected[0]++) << "tag 0 after tag " << tag;
    EXPECT_EQ(table.next(tag), expected[tag]++) << tag;
  }
  EXPECT_EQ(table.peek(7), expected[7]);
}

TEST(SequenceTable, CollidingTagsStayDistinct) {
  SequenceTable table(64);
  // Many tags, including ones that hash alike, each keep their own counter.
  for (int round = 0; round < 3; ++round) {
    for (int tag = 0; tag < 64; ++tag) EXPECT_EQ(table.next(tag << 20), round);
  }
}

}  // namespace
}  // namespace nnf::core
