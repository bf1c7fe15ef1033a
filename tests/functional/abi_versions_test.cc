// Every ABI version as NCCL sees it: the symbol NCCL 2.28 and 2.30 pick when they search our
// library newest-first, each exported table complete, and init/devices/getProperties and a
// message through each version's own entry points.
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/abi_entries.h"
#include "support/harness.h"
#include "support/plugin_ops.h"

namespace nnf::test {
namespace {

void* openLibrary() {
  void* library = dlopen(pluginPath().c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(library, nullptr) << dlerror();
  return library;
}

// NCCL's loader: the first of `versions` (newest first) the library exports wins.
int searchLikeNccl(void* library, const std::vector<int>& versions) {
  for (int version : versions) {
    if (dlsym(library, ("ncclNetPlugin_v" + std::to_string(version)).c_str()) != nullptr) {
      return version;
    }
  }
  return 0;
}

template <typename Net>
const Net* table(void* library, int version) {
  return static_cast<const Net*>(
      dlsym(library, ("ncclNetPlugin_v" + std::to_string(version)).c_str()));
}

TEST(AbiVersions, Nccl228FindsV11AndNccl230FindsV12) {
  void* library = openLibrary();
  ASSERT_NE(library, nullptr);
  EXPECT_EQ(searchLikeNccl(library, {11, 10, 9, 8, 7, 6}), 11) << "NCCL 2.28's search";
  EXPECT_EQ(searchLikeNccl(library, {12, 11, 10, 9, 8, 7, 6}), 12) << "NCCL 2.30's search";
  EXPECT_EQ(searchLikeNccl(library, {8, 7, 6}), 8) << "NCCL 2.19's search";
  EXPECT_EQ(searchLikeNccl(library, {6, 5, 4}), 6) << "NCCL 2.12 to 2.18";
  EXPECT_EQ(searchLikeNccl(library, {13, 5}), 0) << "nothing we do not implement";
}

TEST(AbiVersions, EveryTableIsComplete) {
  void* library = openLibrary();
  ASSERT_NE(library, nullptr);
  expectCommonEntries(table<abi::NetV6>(library, 6));
  auto* v7 = table<abi::NetV7>(library, 7);
  expectCommonEntries(v7);
  expectOffloadEntries(v7);
  auto* v8 = table<abi::NetV8>(library, 8);
  expectCommonEntries(v8);
  expectOffloadEntries(v8);
  // makeVDevice is optional and NULL by design (docs: one device per GPU already).
  auto* v9 = table<abi::NetV9>(library, 9);
  expectCommonEntries(v9);
  expectOffloadEntries(v9);
  EXPECT_EQ(v9->makeVDevice, nullptr);
  auto* v10 = table<abi::NetV10>(library, 10);
  expectCommonEntries(v10);
  expectOffloadEntries(v10);
  EXPECT_EQ(v10->makeVDevice, nullptr);
  auto* v11 = table<abi::NetV11>(library, 11);
  expectCommonEntries(v11);
  expectOffloadEntries(v11);
  EXPECT_EQ(v11->makeVDevice, nullptr);
  EXPECT_NE(v11->finalize, nullptr) << "NCCL 2.28 calls finalize unchecked";
  EXPECT_NE(v11->setNetAttr, nullptr);
  auto* v12 = table<abi::NetV12>(library, 12);
  expectCommonEntries(v12);
  expectOffloadEntries(v12);
  EXPECT_EQ(v12->makeVDevice, nullptr);
  EXPECT_NE(v12->finalize, nullptr);
  EXPECT_NE(v12->setNetAttr, nullptr);
}

// The fields all versions share, against v8's view of the same device.
template <typename Props>
void expectSameDevice(const Props& props, const abi::PropertiesV8& v8) {
  EXPECT_STREQ(props.name, v8.name);
  EXPECT_EQ(props.guid, v8.guid);
  EXPECT_EQ(props.ptrSupport, v8.ptrSupport);
  EXPECT_EQ(props.speed, v8.speed);
  EXPECT_EQ(props.port, v8.port);
  EXPECT_EQ(props.maxComms, v8.maxComms);
  EXPECT_EQ(props.maxRecvs, v8.maxRecvs);
}

// `net`'s properties of `dev`, written over a poisoned struct (so that a field left unset shows),
// against v8's view of the same device.
template <typename Net, typename Props>
void expectPropertiesLikeV8(const Net* net, int dev, const abi::PropertiesV8& v8, Props* props) {
  memset(props, 0xCD, sizeof(*props));
  ASSERT_EQ(net->getProperties(dev, props), abi::kSuccess);
  expectSameDevice(*props, v8);
}

template <typename Props>
void expectV9Fields(const Props& props, int dev) {
  EXPECT_EQ(props.regIsGlobal, 1);
  EXPECT_EQ(props.forceFlush, 0);
  EXPECT_EQ(props.netDeviceType, abi::kNetDeviceHost);
  EXPECT_EQ(props.vProps.ndevs, 1);
  EXPECT_EQ(props.vProps.devs[0], dev);
  EXPECT_GT(props.maxP2pBytes, size_t{INT32_MAX}) << "v9+ carries messages of 2 GiB and more";
  EXPECT_LE(props.maxP2pBytes, abi::kMaxNetSizeBytes) << "NCCL refuses more than 1 TiB";
  EXPECT_EQ(props.maxCollBytes, props.maxP2pBytes);
}

TEST(AbiVersions, InitDevicesAndPropertiesThroughEveryVersion) {
  runOneProcess([](Peer& peer) {
    void* library = openLibrary();
    ASSERT_NE(library, nullptr);
    int count = 0;
    auto* v6 = table<abi::NetV6>(library, 6);
    ASSERT_EQ(v6->init(testLogger), abi::kSuccess);
    ASSERT_EQ(v6->devices(&count), abi::kSuccess);
    EXPECT_EQ(count, peer.ndev);
    auto* v10 = table<abi::NetV10>(library, 10);
    ASSERT_EQ(v10->init(testLogger, nullptr), abi::kSuccess);
    auto* v11 = table<abi::NetV11>(library, 11);
    auto* v12 = table<abi::NetV12>(library, 12);
    void* ctx11 = nullptr;
    void* ctx12 = nullptr;
    abi::CommConfig config{abi::kTrafficClassUndef};
    ASSERT_EQ(v11->init(&ctx11, 1, &config, testLogger, nullptr), abi::kSuccess);
    ASSERT_EQ(v12->init(&ctx12, 2, nullptr, testLogger, nullptr), abi::kSuccess);
    EXPECT_NE(ctx11, nullptr);
    EXPECT_NE(ctx12, ctx11) << "one context per communicator";

    for (int dev = 0; dev < peer.ndev; ++dev) {
      SCOPED_TRACE("device " + std::to_string(dev));
      abi::PropertiesV8 p8;
      ASSERT_EQ(peer.net->getProperties(dev, &p8), abi::kSuccess);
      abi::PropertiesV6 p6;
      ASSERT_NO_FATAL_FAILURE(expectPropertiesLikeV8(v6, dev, p8, &p6));
      abi::PropertiesV7 p7;
      ASSERT_NO_FATAL_FAILURE(expectPropertiesLikeV8(table<abi::NetV7>(library, 7), dev, p8, &p7));
      EXPECT_EQ(p7.netDeviceType, abi::kNetDeviceHost);
      EXPECT_EQ(p7.netDeviceVersion, 0);
      abi::PropertiesV9 p9;
      ASSERT_NO_FATAL_FAILURE(expectPropertiesLikeV8(table<abi::NetV9>(library, 9), dev, p8, &p9));
      expectV9Fields(p9, dev);
      abi::PropertiesV11 p11;
      ASSERT_NO_FATAL_FAILURE(expectPropertiesLikeV8(v11, dev, p8, &p11));
      expectV9Fields(p11, dev);
      EXPECT_EQ(p11.maxMultiRequestSize, 1);
      abi::PropertiesV12 p12;
      ASSERT_NO_FATAL_FAILURE(expectPropertiesLikeV8(v12, dev, p8, &p12));
      expectV9Fields(p12, dev);
      EXPECT_EQ(p12.maxMultiRequestSize, 1);
      EXPECT_EQ(p12.railId, dev) << "rail = device index (docs/pytorch.md)";
      EXPECT_EQ(p12.planeId, abi::kNetIdUndef);
    }

    abi::NetAttr attr{};
    attr.op = 1;
    EXPECT_EQ(v12->setNetAttr(ctx12, &attr), abi::kSuccess);
    EXPECT_EQ(v11->finalize(ctx11), abi::kSuccess);
    EXPECT_EQ(v12->finalize(ctx12), abi::kSuccess);
    EXPECT_EQ(peer.warnings(), 0);
    // A finalized context is refused, not dereferenced.
    void* listen = nullptr;
    Handle handle;
    EXPECT_NE(v12->listen(ctx12, peer.dev, handle.bytes, &listen), abi::kSuccess);
    EXPECT_NE(v11->finalize(ctx11), abi::kSuccess);
    EXPECT_EQ(peer.warnings(), 2);
  });
}

TEST(AbiVersions, MessageAboveTheAdvertisedLimitIsRefused) {
  runOneProcess([](Peer& peer) {
    void* library = openLibrary();
    ASSERT_NE(library, nullptr);
    auto* v12 = table<abi::NetV12>(library, 12);
    abi::PropertiesV12 props;
    ASSERT_EQ(v12->getProperties(peer.dev, &props), abi::kSuccess);
    Handle handle;
    void* listen = nullptr;
    void* send = nullptr;
    void* recv = nullptr;
    ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, &listen));
    ASSERT_NO_FATAL_FAILURE(connectLocal(peer, listen, &handle, &send, &recv));
    char byte = 0;
    void* request = nullptr;
    EXPECT_EQ(v12->isend(send, &byte, props.maxP2pBytes + 1, 1, nullptr, nullptr, &request),
              abi::kInvalidArgument);
    void* data[1] = {&byte};
    size_t sizes[1] = {props.maxP2pBytes + 1};
    int tags[1] = {1};
    void* mhandles[1] = {nullptr};
    void* pHandles[1] = {nullptr};
    EXPECT_EQ(v12->irecv(recv, 1, data, sizes, tags, mhandles, pHandles, &request),
              abi::kInvalidArgument);
    EXPECT_EQ(peer.warnings(), 2);
    for (const std::string& text : peer.warningTexts()) {
      EXPECT_NE(text.find("exceed"), std::string::npos) << text;
    }
    closeSend(peer, send);
    closeRecv(peer, recv);
    closeListen(peer, listen);
  });
}

}  // namespace
}  // namespace nnf::test
