// What NCCL requires of every exported net table, whatever its ABI version: checked by the unit
// test of the v8 table (unit/abi_test.cc) and by the functional test of every version
// (functional/abi_versions_test.cc).
#pragma once

#include <gtest/gtest.h>

namespace nnf::test {

// Entry points every version has, all mandatory for NCCL (it calls them unchecked).
template <typename Net>
void expectCommonEntries(const Net* net) {
  ASSERT_NE(net, nullptr);
  ASSERT_NE(net->name, nullptr);
  EXPECT_STREQ(net->name, "Fabric");
  EXPECT_NE(net->init, nullptr);
  EXPECT_NE(net->devices, nullptr);
  EXPECT_NE(net->getProperties, nullptr);
  EXPECT_NE(net->listen, nullptr);
  EXPECT_NE(net->connect, nullptr);
  EXPECT_NE(net->accept, nullptr);
  EXPECT_NE(net->regMr, nullptr);
  EXPECT_NE(net->regMrDmaBuf, nullptr);
  EXPECT_NE(net->deregMr, nullptr);
  EXPECT_NE(net->isend, nullptr);
  EXPECT_NE(net->irecv, nullptr);
  EXPECT_NE(net->iflush, nullptr);
  EXPECT_NE(net->test, nullptr);
  EXPECT_NE(net->closeSend, nullptr);
  EXPECT_NE(net->closeRecv, nullptr);
  EXPECT_NE(net->closeListen, nullptr);
}

// The device-offload entries of v7 and later.
template <typename Net>
void expectOffloadEntries(const Net* net) {
  EXPECT_NE(net->getDeviceMr, nullptr);
  EXPECT_NE(net->irecvConsumed, nullptr);
}

}  // namespace nnf::test
