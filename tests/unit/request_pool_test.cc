#include <gtest/gtest.h>

#include <set>

#include "core/request.h"
#include "core/sequence_table.h"

namespace nnf::core {
namespace {

TEST(RequestPool, HandsOutEachRequestOnceUntilReleased) {
  RequestPool pool(nullptr, 32, 4);
  std::set<Request*> seen;
  for (int i = 0; i < 32; ++i) {
    Request* request = pool.acquire(3);
    ASSERT_NE(request, nullptr);
    EXPECT_TRUE(seen.insert(request).second);
    EXPECT_EQ(request->state, Request::State::kActive);
    EXPECT_EQ(request->count, 3);
    EXPECT_EQ(request->remaining, 3);
    EXPECT_TRUE(pool.owns(request));
  }
  EXPECT_EQ(pool.acquire(1), nullptr);  // the 33rd: NCCL must retry
  EXPECT_EQ(pool.inUse(), 32u);
  Request* back = *seen.begin();
  back->postedNs = 12345;  // stamped by a stall check during its previous life
  back->error = abi::kRemoteError;
  pool.release(back);
  EXPECT_EQ(back->state, Request::State::kFree);
  EXPECT_EQ(pool.acquire(1), back);
  // A reused request starts clean: its wait is timed afresh.
  EXPECT_EQ(back->postedNs, 0u);
  EXPECT_EQ(back->error, abi::kSuccess);
}

TEST(RequestPool, OperationsBelongToTheirRequest) {
  RequestPool pool(nullptr, 4, 8);
  for (Request& request : pool.all()) {
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(request.ops[i].request, &request);
      EXPECT_EQ(request.ops[i].index, i);
    }
  }
  // Operations of different requests never alias.
  EXPECT_EQ(pool.all()[1].ops, pool.all()[0].ops + 8);
  EXPECT_EQ(pool.all()[1].sizes, pool.all()[0].sizes + 8);
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

TEST(SequenceTable, CollidingTagsStayDistinct) {
  SequenceTable table(64);
  // Many tags, including ones that hash alike, each keep their own counter.
  for (int round = 0; round < 3; ++round) {
    for (int tag = 0; tag < 64; ++tag) EXPECT_EQ(table.next(tag << 20), round);
  }
}

}  // namespace
}  // namespace nnf::core
