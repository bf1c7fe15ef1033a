// The layers only point down (docs/architecture.md, "Layers"): every #include "<layer>/..." in
// src/ and include/ is checked against the table below, so that an upward include fails here
// instead of growing into a cycle. Top to bottom:
//   abi (the ABI shims and the plugin's assembly)
//   protocol (sendrecv, rdma: plugged into core through core/protocol.h), and beside it
//   rma (the one-sided RMA plugin's core: it runs on core's devices, which hand it its peers'
//   writes through core/remote_writes.h)
//   core (plugin, devices, comms, requests)
//   memory, topology, platform, fabric, config, log
//   include/nccl_net (NCCL's ABI declarations): types.h for every layer, the tables for abi alone;
//   include/nccl_rma (the RMA plugin's tables, over nccl_net's properties): abi alone.
#include <dirent.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/test_env.h"

namespace nnf {
namespace {

// What each layer may include besides itself. "types" is include/nccl_net/types.h, "nccl_net"
// the rest of include/nccl_net.
const std::map<std::string, std::set<std::string>> kMayInclude = {
    {"abi",
     {"protocol", "rma", "core", "memory", "topology", "platform", "fabric", "config", "log",
      "types", "nccl_net", "nccl_rma"}},
    {"protocol", {"core", "memory", "platform", "fabric", "config", "log", "types"}},
    {"rma", {"core", "memory", "platform", "fabric", "config", "log", "types"}},
    {"core", {"memory", "topology", "platform", "fabric", "config", "log", "types"}},
    {"memory", {"fabric", "config", "log", "types"}},
    {"topology", {"config", "log", "types"}},
    {"platform", {"config", "log", "types"}},
    {"fabric", {"platform", "config", "log", "types"}},
    {"config", {"log", "types"}},
    {"log", {"types"}},
    {"nccl_net", {"types"}},
    {"nccl_rma", {"nccl_net", "types"}},
};

// Upward includes that are known and scheduled to go (issue 25: core gets its protocol from a
// factory the assembly passes in, and each protocol owns its per-device resources). Each entry
// is "file -> included file"; one that no longer occurs fails the test too, so the list shrinks.
const std::set<std::string> kKnownUpward = {
    "src/core/device.cc -> protocol/rdma.h",
    "src/core/device.cc -> protocol/rdma_eager.h",
    "src/core/device.cc -> protocol/rdma_wire.h",
    "src/core/device.cc -> protocol/sendrecv.h",
};

void listSources(const std::string& root, const std::string& relative,
                 std::vector<std::string>* out) {
  DIR* dir = opendir((root + "/" + relative).c_str());
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    std::string path = relative + "/" + name;
    if (entry->d_type == DT_DIR) {
      listSources(root, path, out);
    } else if (name.size() > 2 && (name.substr(name.size() - 2) == ".h" ||
                                   (name.size() > 3 && name.substr(name.size() - 3) == ".cc"))) {
      out->push_back(path);
    }
  }
  closedir(dir);
}

// "src/core/device.cc" -> "core", "include/nccl_net/net_v8.h" -> "nccl_net".
std::string layerOfFile(const std::string& path) {
  size_t first = path.find('/');
  size_t second = path.find('/', first + 1);
  return path.substr(first + 1, second - first - 1);
}

// "core/device.h" -> "core", "nccl_net/types.h" -> "types", "support/x.h" -> "support".
std::string layerOfInclude(const std::string& include) {
  if (include == "nccl_net/types.h") return "types";
  return include.substr(0, include.find('/'));
}

TEST(Layers, NoIncludePointsUp) {
  const std::string root = test::sourceDir();
  std::vector<std::string> files;
  listSources(root, "src", &files);
  listSources(root, "include", &files);
  ASSERT_GT(files.size(), 50u) << "the sources were not found under " << root;
  const std::regex includeLine("^#include \"([a-z_]+/[^\"]+)\"");
  std::set<std::string> upwardSeen;
  int checked = 0;
  for (const std::string& file : files) {
    std::string layer = layerOfFile(file);
    auto allowed = kMayInclude.find(layer);
    ASSERT_NE(allowed, kMayInclude.end()) << file << " is in no known layer";
    std::ifstream in(root + "/" + file);
    for (std::string line; std::getline(in, line);) {
      std::smatch match;
      if (!std::regex_search(line, match, includeLine)) continue;
      std::string target = layerOfInclude(match[1]);
      ++checked;
      if (target == layer || allowed->second.count(target) != 0) continue;
      std::string edge = file + " -> " + match[1].str();
      if (kKnownUpward.count(edge) != 0) {
        upwardSeen.insert(edge);
        continue;
      }
      ADD_FAILURE() << edge << ": " << layer << " may not include " << target;
    }
  }
  EXPECT_GT(checked, 200);
  for (const std::string& edge : kKnownUpward) {
    EXPECT_EQ(upwardSeen.count(edge), 1u) << "'" << edge << "' is gone: drop it from kKnownUpward";
  }
}

// The checker itself: an upward include of each kind is caught.
TEST(Layers, TheTableRefusesWhatPointsUp) {
  auto allowed = [](const std::string& from, const std::string& include) {
    std::string target = layerOfInclude(include);
    return target == from || kMayInclude.at(from).count(target) != 0;
  };
  EXPECT_FALSE(allowed("core", "protocol/rdma.h"));
  EXPECT_FALSE(allowed("fabric", "core/device.h"));
  EXPECT_FALSE(allowed("log", "config/config.h"));
  EXPECT_FALSE(allowed("core", "nccl_net/net_v8.h")) << "only the shims see the tables";
  EXPECT_FALSE(allowed("protocol", "abi/entries.h"));
  EXPECT_TRUE(allowed("protocol", "core/protocol.h"));
  EXPECT_TRUE(allowed("memory", "nccl_net/types.h"));
  EXPECT_TRUE(allowed("abi", "nccl_net/net.h"));
  EXPECT_FALSE(allowed("rma", "protocol/rdma.h")) << "rma sits beside protocol, not above it";
  EXPECT_FALSE(allowed("protocol", "rma/group.h"));
  EXPECT_FALSE(allowed("core", "rma/engine.h")) << "core hands writes out through an interface";
  EXPECT_FALSE(allowed("rma", "nccl_rma/rma_v14.h")) << "only the shims see the tables";
  EXPECT_TRUE(allowed("abi", "nccl_rma/rma.h"));
  EXPECT_TRUE(allowed("rma", "core/remote_writes.h"));
}

}  // namespace
}  // namespace nnf
