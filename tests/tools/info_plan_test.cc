// fabric-net-info prints the plugin's own plan, on every hwloc fixture (tests/fixtures/hwloc and
// ../shared/fixtures/hwloc). Each fixture gets a provider list made here, as libfabric would
// list that machine: sockets first (never picked unless named), then efa with one entry per EFA
// NIC of the fixture (domain "<device>-rdm", device_attr "<device>", the NIC's PCI address and
// line rate; each listed twice, as libfabric lists a domain per fabric), then tcp and shm
// without PCI data. The plan the plugin makes from it (core::planNetwork, what Plugin::init acts
// on) is checked on its own against the list, then against what the tool prints from the same
// facts: its JSON and its table (live mode), and its offline mode (--topology), which lists the
// dump's NICs itself. A tool that decided anything again (another provider, NICs named by
// device_attr, one carrying rail under rdma, its own speed) fails here.
#include <gtest/gtest.h>

#include <dirent.h>
#include <rdma/fabric.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "config/config.h"
#include "core/network_plan.h"
#include "info.h"
#include "info_list.h"
#include "support/json.h"
#include "support/test_env.h"
#include "topology/hwloc_topology.h"
#include "topology/planner.h"

namespace nnf {
namespace {

constexpr uint64_t kTaggedCaps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV;
constexpr uint64_t kRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

std::vector<std::string> xmlFilesIn(const std::string& dir) {
  std::vector<std::string> out;
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return out;
  while (dirent* entry = readdir(handle)) {
    std::string name = entry->d_name;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".xml") == 0) {
      out.push_back(dir + "/" + name);
    }
  }
  closedir(handle);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> everyFixture() {
  std::vector<std::string> out = xmlFilesIn(test::sourceDir() + "/tests/fixtures/hwloc");
  std::string shared = test::sharedFixturesDir();
  if (!shared.empty()) {
    for (const std::string& file : xmlFilesIn(shared + "/hwloc")) out.push_back(file);
  }
  return out;
}

// An EFA NIC of a fixture, read from hwloc here rather than through the code under test.
struct FixtureNic {
  topology::PciAddress pci;
  std::string device;  // the OpenFabrics OS device, else the name udev gives it
  uint64_t speedBps = 0;
};

std::vector<FixtureNic> efaNicsOf(const topology::Topology& topo) {
  std::vector<FixtureNic> out;
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(topo.get(), nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(topo.get(), obj)) {
    const auto& pci = obj->attr->pcidev;
    if (pci.vendor_id != 0x1d0f || (pci.device_id & 0xfff0) != 0xefa0) continue;
    FixtureNic nic;
    nic.pci = {pci.domain, pci.bus, pci.dev, pci.func};
    nic.device = "rdmap" + std::to_string(pci.bus) + "s" + std::to_string(pci.dev);
    for (hwloc_obj_t child = obj->io_first_child; child != nullptr; child = child->next_sibling) {
      if (child->type == HWLOC_OBJ_OS_DEVICE &&
          child->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
        nic.device = child->name;
      }
    }
    // efa0/efa1 100 Gb/s, efa2 200 Gb/s, efa3 400 Gb/s.
    nic.speedBps = pci.device_id <= 0xefa1   ? 100000000000ULL
                   : pci.device_id == 0xefa2 ? 200000000000ULL
                                             : 400000000000ULL;
    out.push_back(nic);
  }
  return out;
}

// The NICs in PCI order, or last to first: libfabric's order need not be PCI order, and the plan
// of NICs close to no GPU follows it (docs/topology.md, rule 5). Without `efa` (its driver not
// loaded), the list is the rest.
std::vector<tools::InfoEntry> providerListOf(std::vector<FixtureNic> nics, bool pciOrder,
                                             bool efa) {
  std::vector<tools::InfoEntry> list;
  list.push_back({"sockets", "127.0.0.0/8", "lo", "", std::nullopt, 0, kTaggedCaps | kRmaCaps, 8});
  std::sort(nics.begin(), nics.end(),
            [](const FixtureNic& a, const FixtureNic& b) { return a.pci < b.pci; });
  if (!pciOrder) std::reverse(nics.begin(), nics.end());
  if (!efa) nics.clear();
  for (const FixtureNic& nic : nics) {
    tools::InfoEntry entry{"efa",
                           "efa",
                           nic.device + "-rdm",
                           nic.device,
                           nic.pci,
                           nic.speedBps,
                           kTaggedCaps | kRmaCaps | FI_HMEM,
                           4};
    list.push_back(entry);
    list.push_back(entry);
  }
  list.push_back(
      {"tcp;ofi_rxm", "127.0.0.0/8", "lo", "", std::nullopt, 0, kTaggedCaps | kRmaCaps, 8});
  list.push_back({"shm", "shm", "shm", "", std::nullopt, 0, kTaggedCaps | kRmaCaps | FI_HMEM, 8});
  return list;
}

// One way of running the plugin on a fixture: its configuration and what the probe answers.
struct Variant {
  std::string name;
  std::map<std::string, std::string> env;
  bool writesEmulated = false;
  bool efa = true;  // the list has the efa entries
};

config::Config configOf(const Variant& variant) {
  return config::Config::load([&variant](const char* name) -> const char* {
    auto it = variant.env.find(name);
    return it == variant.env.end() ? nullptr : it->second.c_str();
  });
}

core::PlanSources sourcesFor(const std::string& fixture, const std::vector<FixtureNic>& nics,
                             const Variant& variant, bool pciOrder = false) {
  core::PlanSources sources;
  sources.query = tools::queryFrom(providerListOf(nics, pciOrder, variant.efa));
  sources.probeBool = [emulated = variant.writesEmulated](const fi_info*, int, int, bool* value) {
    *value = emulated;
    return 0;
  };
  sources.topology = [fixture] { return topology::Topology::fromXmlFile(fixture); };
  sources.cudaUsable = [](const config::Config&) { return true; };
  return sources;
}

template <typename Run>
std::string captured(const Run& run, int* status) {
  char* text = nullptr;
  size_t length = 0;
  FILE* out = open_memstream(&text, &length);
  *status = run(out);
  fclose(out);
  std::string result(text, length);
  free(text);
  return result;
}

std::vector<std::string> firstOf(const std::vector<std::string>& names, size_t count) {
  return std::vector<std::string>(names.begin(), names.begin() + static_cast<long>(count));
}

std::string hex(uint64_t guid) {
  char text[24];
  snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(guid));
  return text;
}

class InfoPlan : public ::testing::Test {
 protected:
  // The plugin's plan checked against the provider list, independently of the tool.
  void expectPlanFitsTheList(const core::NetworkPlan& plan, const Variant& variant,
                             const std::vector<FixtureNic>& nics) {
    std::map<std::string, uint64_t> speedOf;
    for (const FixtureNic& nic : nics) speedOf[nic.device + "-rdm"] = nic.speedBps;
    bool named = variant.env.count("NCCL_FABRIC_PROVIDER") != 0;
    // Without efa, the first provider listed that is not skipped by default: sockets is.
    std::string expected = named         ? variant.env.at("NCCL_FABRIC_PROVIDER")
                           : variant.efa ? "efa"
                                         : "tcp;ofi_rxm";
    EXPECT_EQ(plan.choice.provider, expected);
    bool rdma = variant.env.count("NCCL_FABRIC_PROTOCOL") == 0 && !variant.writesEmulated;
    EXPECT_EQ(plan.protocol.rdma, rdma);
    if (expected != "efa") return;
    EXPECT_EQ(plan.choice.domains.size(), nics.size());
    size_t rails = 0;
    for (const core::DeviceSpec& spec : plan.devices.specs) {
      EXPECT_EQ(spec.carryingRails, rdma ? std::min<size_t>(spec.railNames.size(), 4) : 1);
      int64_t speed = 0;
      for (size_t r = 0; r < spec.railNames.size(); ++r) {
        ASSERT_EQ(speedOf.count(spec.railNames[r]), 1u)
            << spec.railNames[r] << " is no domain of the list";
        if (r < spec.carryingRails) speed += static_cast<int64_t>(speedOf[spec.railNames[r]]);
      }
      EXPECT_EQ(spec.properties.speedMbps, speed / 1000000) << spec.properties.name;
      EXPECT_EQ(spec.properties.name, spec.railNames.front());
      rails += spec.railNames.size();
    }
    EXPECT_EQ(rails, nics.size());
  }

  // What the tool printed as JSON is the plan, field by field.
  void expectJsonIsThePlan(const std::string& printed, const core::NetworkPlan& plan) {
    test::Json json = test::Json::parse(printed);
    EXPECT_EQ(json.at("provider").string(), plan.choice.provider);
    EXPECT_EQ(json.at("protocol").string(), plan.protocol.rdma ? "rdma" : "sendrecv");
    EXPECT_EQ(json.at("carryingRails").number(), static_cast<double>(plan.carryingRails));
    const std::vector<test::Json>& devices = json.at("devices").array();
    ASSERT_EQ(devices.size(), plan.devices.specs.size());
    for (size_t d = 0; d < devices.size(); ++d) {
      const core::DeviceSpec& spec = plan.devices.specs[d];
      const topology::Device& planned = plan.devices.plan.devices[d];
      const test::Json& device = devices[d];
      SCOPED_TRACE("device " + std::to_string(d));
      EXPECT_EQ(device.at("index").number(), static_cast<double>(d));
      EXPECT_EQ(device.at("name").string(), spec.properties.name);
      EXPECT_EQ(device.at("rails").strings(), spec.railNames);
      EXPECT_EQ(device.at("rails").strings().front(), spec.properties.name);  // the leader
      EXPECT_EQ(device.at("carrying").strings(), firstOf(spec.railNames, spec.carryingRails));
      EXPECT_EQ(device.at("speedMbps").number(), static_cast<double>(spec.properties.speedMbps));
      EXPECT_EQ(device.at("gpus").strings(), spec.gpus);
      EXPECT_EQ(device.at("guid").string(), hex(spec.properties.guid));
      if (spec.properties.pciPath.empty()) {
        EXPECT_TRUE(device.at("pciPath").isNull());
      } else {
        EXPECT_EQ(device.at("pciPath").string(), spec.properties.pciPath);
      }
      EXPECT_EQ(device.at("placement").string(), topology::placementName(planned.placement));
      EXPECT_EQ(device.at("numa").number(), static_cast<double>(planned.numaNode));
      // Each rail by the PCI address of its fi_info, or its domain without one.
      std::vector<std::string> addresses;
      for (const fi_info* rail : spec.rails) {
        if (rail->nic == nullptr || rail->nic->bus_attr->bus_type != FI_BUS_PCI) {
          addresses.push_back(rail->domain_attr->name);
          continue;
        }
        const fi_pci_attr& pci = rail->nic->bus_attr->attr.pci;
        addresses.push_back(
            topology::PciAddress{pci.domain_id, pci.bus_id, pci.device_id, pci.function_id}.str());
      }
      EXPECT_EQ(device.at("nics").strings(), addresses);
    }
  }

  // The device table of the live report: one row per device, in the plan's order and words.
  void expectTableIsThePlan(const std::string& printed, const core::NetworkPlan& plan) {
    std::istringstream lines(printed);
    std::string line;
    while (std::getline(lines, line) && line.rfind("dev  ", 0) != 0) {
    }
    ASSERT_FALSE(lines.eof()) << "no device table in:\n" << printed;
    EXPECT_NE(printed.find("== device plan (provider " + plan.choice.provider + ", " +
                           std::to_string(plan.choice.domains.size()) + " NIC(s))"),
              std::string::npos);
    EXPECT_NE(printed.find(std::string("protocol ") + (plan.protocol.rdma ? "rdma" : "sendrecv") +
                           ": " + plan.protocol.reason),
              std::string::npos);
    for (size_t d = 0; d < plan.devices.specs.size(); ++d) {
      const core::DeviceSpec& spec = plan.devices.specs[d];
      SCOPED_TRACE("device " + std::to_string(d));
      ASSERT_TRUE(std::getline(lines, line));
      std::istringstream row(line);
      std::string index, name, placement, unit, numa, gpus;
      size_t rails = 0, carrying = 0;
      double gbps = 0;
      row >> index >> name >> placement >> rails >> carrying >> gbps >> unit >> numa >> gpus;
      EXPECT_EQ(index, std::to_string(d));
      EXPECT_EQ(name, spec.properties.name);
      EXPECT_EQ(rails, spec.railNames.size());
      EXPECT_EQ(carrying, spec.carryingRails);
      EXPECT_EQ(gbps * 1000, static_cast<double>(spec.properties.speedMbps));
      std::vector<std::string> marked;
      for (std::string rail; row >> rail;) marked.push_back(rail);
      ASSERT_EQ(marked.size(), spec.railNames.size());
      for (size_t r = 0; r < marked.size(); ++r) {
        EXPECT_EQ(marked[r], spec.railNames[r] + (r < spec.carryingRails ? "*" : ""));
      }
    }
    // The provider listing marks the plan's choice, and sockets as passed over unless named.
    bool chosenMarked = false;
    bool socketsMarked = false;
    std::istringstream all(printed);
    while (std::getline(all, line)) {
      std::istringstream words(line);
      std::string provider;
      words >> provider;
      if (provider == plan.choice.provider && line.find("(chosen)") != std::string::npos) {
        chosenMarked = true;
      }
      if (provider == "sockets" && line.find("(too slow") != std::string::npos) {
        socketsMarked = true;
      }
    }
    EXPECT_TRUE(chosenMarked) << printed;
    EXPECT_EQ(socketsMarked, plan.choice.provider != "sockets") << printed;
  }

  void checkFixture(const std::string& fixture) {
    topology::Topology topo = topology::Topology::fromXmlFile(fixture);
    std::vector<FixtureNic> nics = efaNicsOf(topo);
    ASSERT_FALSE(nics.empty()) << "every fixture has EFA NICs";
    std::vector<Variant> variants = {
        {"auto", {}, false},
        {"sendrecv", {{"NCCL_FABRIC_PROTOCOL", "sendrecv"}}, false},
        {"auto, writes emulated", {}, true},
        {"sockets named", {{"NCCL_FABRIC_PROVIDER", "sockets"}}, false},
        {"no efa", {}, false, /*efa=*/false},
    };
    // NICs grouped by hand: by the names NCCL_FABRIC_RAILS matches (the domains).
    if (nics.size() >= 2) {
      variants.push_back(
          {"rails by hand",
           {{"NCCL_FABRIC_RAILS", nics[1].device + "-rdm," + nics[0].device + "-rdm"}},
           false,
           true});
    }
    for (const Variant& variant : variants) {
      SCOPED_TRACE(fixture + ", " + variant.name);
      config::Config config = configOf(variant);
      core::PlanSources sources = sourcesFor(fixture, nics, variant);
      core::NetworkPlan plan = core::planNetwork(config, sources);
      ASSERT_FALSE(plan.devices.specs.empty());
      expectPlanFitsTheList(plan, variant, nics);
      if (variant.env.count("NCCL_FABRIC_RAILS") != 0) {
        ASSERT_EQ(plan.devices.plan.devices.back().placement, topology::Placement::kManual)
            << "the manual group is the last device here";
      }

      tools::InfoOptions options;
      options.plugin = false;
      options.json = true;
      int status = -1;
      std::string json =
          captured([&](FILE* out) { return tools::runLive(options, config, sources, out, stderr); },
                   &status);
      ASSERT_EQ(status, 0);
      expectJsonIsThePlan(json, plan);

      options.json = false;
      std::string table =
          captured([&](FILE* out) { return tools::runLive(options, config, sources, out, stderr); },
                   &status);
      ASSERT_EQ(status, 0);
      expectTableIsThePlan(table, plan);

      if (variant.writesEmulated || !variant.efa ||
          variant.env.count("NCCL_FABRIC_PROVIDER") != 0) {
        continue;
      }
      // Offline, the tool lists the dump's NICs itself: it must list them as efa does, in PCI
      // order.
      core::NetworkPlan inPciOrder =
          core::planNetwork(config, sourcesFor(fixture, nics, variant, /*pciOrder=*/true));
      options.topologyFile = fixture;
      options.json = true;
      std::string offline = captured(
          [&](FILE* out) { return tools::runOffline(options, config, out, stderr); }, &status);
      ASSERT_EQ(status, 0);
      expectJsonIsThePlan(offline, inPciOrder);
    }
  }
};

TEST_F(InfoPlan, ToolPrintsThePluginsPlanOnEveryFixture) {
  std::vector<std::string> fixtures = everyFixture();
  ASSERT_GE(fixtures.size(), 7u) << "tests/fixtures/hwloc was not found";
  if (test::sharedFixturesDir().empty()) {
    std::fprintf(stderr, "../shared/fixtures is absent: the real EC2 dumps are not compared\n");
  } else {
    ASSERT_GE(fixtures.size(), 15u);
  }
  for (const std::string& fixture : fixtures) checkFixture(fixture);
}

// The p5 in numbers, so that a plan that drifts from the machine shows even where tool and plugin
// drift together: eight devices of four 100 Gb/s rails that all carry data under rdma.
TEST_F(InfoPlan, P5CarriesOnFourRailsUnderRdma) {
  std::string shared = test::sharedFixturesDir();
  if (shared.empty()) GTEST_SKIP() << "../shared/fixtures is absent";
  std::string fixture = shared + "/hwloc/p5.48xl-topo.xml";
  std::vector<FixtureNic> nics = efaNicsOf(topology::Topology::fromXmlFile(fixture));
  Variant automatic{"auto", {}, false, true};
  core::NetworkPlan plan =
      core::planNetwork(configOf(automatic), sourcesFor(fixture, nics, automatic));
  ASSERT_EQ(plan.devices.specs.size(), 8u);
  const core::DeviceSpec& first = plan.devices.specs.front();
  EXPECT_EQ(first.properties.name, "rdmap79s0-rdm");
  EXPECT_EQ(first.railNames, (std::vector<std::string>{"rdmap79s0-rdm", "rdmap80s0-rdm",
                                                       "rdmap81s0-rdm", "rdmap82s0-rdm"}));
  EXPECT_EQ(first.carryingRails, 4u);
  EXPECT_EQ(first.properties.speedMbps, 400000);
  EXPECT_TRUE(plan.protocol.rdma);
}

}  // namespace
}  // namespace nnf
