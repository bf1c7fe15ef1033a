// The device planner, device properties and NCCL topology XML on small hand-written hwloc
// fixtures (tests/fixtures/hwloc), one per situation the planner must get right.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "support/test_env.h"
#include "topology/device_props.h"
#include "topology/efa.h"
#include "topology/hwloc_topology.h"
#include "topology/nccl_topo_xml.h"
#include "topology/planner.h"

namespace nnf::topology {
namespace {

Topology load(const std::string& name) {
  return Topology::fromXmlFile(test::sourceDir() + "/tests/fixtures/hwloc/" + name);
}

// "gpu,gpu>nic,nic" per device: the plan in one comparable line each.
std::vector<std::string> summary(const Plan& plan, const std::vector<Nic>& nics) {
  std::vector<std::string> out;
  for (const Device& d : plan.devices) {
    std::string line;
    for (size_t i = 0; i < d.gpus.size(); ++i) line += (i ? "," : "") + d.gpus[i].str();
    line += ">";
    for (size_t i = 0; i < d.nics.size(); ++i) {
      const Nic& nic = nics[d.nics[i]];
      line += (i ? "," : "") + (nic.pci ? nic.pci->str() : nic.name);
    }
    out.push_back(line);
  }
  return out;
}

Nic pciNic(const std::string& name, const char* addr, int64_t mbps = 100000) {
  return Nic{name, PciAddress::parse(addr), mbps};
}

Nic virtualNic(const std::string& name, int64_t mbps = 100000) {
  return Nic{name, std::nullopt, mbps};
}

TEST(Topology, LoadFailureNamesTheFile) {
  try {
    Topology::fromXmlFile("/nonexistent/topo.xml");
    FAIL() << "loaded a missing file";
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/topo.xml"), std::string::npos);
  }
}

TEST(Topology, FindsOnlyNvidiaGpus) {
  Topology topo = load("no-gpu.xml");
  EXPECT_TRUE(topo.gpus().empty());  // 00:03.0 is Amazon's VGA device, not NVIDIA
  Topology more = load("more-gpus.xml");
  ASSERT_EQ(more.gpus().size(), 4u);  // class 0302 (3D) and 0300 (VGA) both count
  EXPECT_EQ(pciAddressOf(more.gpus()[2]).str(), "0000:15:00.0");
}

TEST(Efa, ListsEfaNicsButNotEna) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  ASSERT_EQ(nics.size(), 4u);
  EXPECT_EQ(nics[0].name, "rdmap19s0");
  EXPECT_EQ(nics[0].pci->str(), "0000:13:00.0");
  EXPECT_EQ(nics[0].speedMbps, 200000);  // efa2
  EXPECT_EQ(nics[3].pci->str(), "0000:17:00.0");
  // An EFA NIC without an OpenFabrics OS device is named by its address.
  std::vector<Nic> plain = listEfaNics(load("no-gpu.xml"));
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[0].name, "rdmap0s6");
  EXPECT_EQ(plain[1].name, "0000:00:07.0");
}

TEST(Planner, NoGpuGivesOneDevicePerNic) {
  Topology topo = load("no-gpu.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  EXPECT_EQ(summary(plan, nics), (std::vector<std::string>{">0000:00:06.0", ">0000:00:07.0"}));
  EXPECT_EQ(plan.devices[0].placement, Placement::kNoGpu);
  EXPECT_EQ(plan.devices[0].numaNode, 0);
  EXPECT_EQ(plan.devices[0].cpuset, "0");
}

TEST(Planner, TwoGpusOnOneSwitchSplitFourNicsTwoAndTwo) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  EXPECT_EQ(summary(plan, nics),
            (std::vector<std::string>{"0000:15:00.0>0000:13:00.0,0000:14:00.0",
                                      "0000:18:00.0>0000:16:00.0,0000:17:00.0"}));
  EXPECT_EQ(plan.devices[0].placement, Placement::kGpu);
  EXPECT_EQ(deviceSpeedMbps(plan.devices[0], nics, SIZE_MAX), 400000);
  EXPECT_EQ(deviceName(plan.devices[1], nics), "rdmap22s0");
}

TEST(Planner, PlanDoesNotDependOnLibfabricOrder) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  std::vector<Nic> reversed(nics.rbegin(), nics.rend());
  EXPECT_EQ(summary(planDevices(reversed, &topo), reversed),
            summary(planDevices(nics, &topo), nics));
}

TEST(Planner, MoreGpusThanNicsEachNicServesAShare) {
  Topology topo = load("more-gpus.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  // Three GPUs, two NICs on one switch: the first NIC serves two GPUs; GPU 23 has no NIC.
  EXPECT_EQ(summary(plan, nics), (std::vector<std::string>{"0000:13:00.0,0000:14:00.0>0000:16:00.0",
                                                           "0000:15:00.0>0000:17:00.0"}));
}

TEST(Planner, NicFarFromEveryGpuComesLastOnItsOwn) {
  Topology topo = load("far-nic.xml");
  // libfabric lists the far NIC first; GPU devices still come first.
  std::vector<Nic> nics = {pciNic("far0", "0000:41:00.0"), pciNic("near0", "0000:14:00.0")};
  Plan plan = planDevices(nics, &topo);
  EXPECT_EQ(summary(plan, nics),
            (std::vector<std::string>{"0000:13:00.0>0000:14:00.0", ">0000:41:00.0"}));
  EXPECT_EQ(plan.devices[0].placement, Placement::kGpu);
  EXPECT_EQ(plan.devices[1].placement, Placement::kNoGpu);
  EXPECT_EQ(plan.devices[1].numaNode, 0);
}

TEST(Planner, OneNicServesTwoGpusBehindAFlattenedHostBridge) {
  Topology topo = load("flat-hostbridge.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  EXPECT_EQ(summary(plan, nics), (std::vector<std::string>{"0000:10:1c.0,0000:10:1d.0>0000:10:1b.0",
                                                           "0000:90:1c.0>0000:90:1b.0"}));
  EXPECT_EQ(plan.devices[0].numaNode, 0);
  EXPECT_EQ(plan.devices[1].numaNode, 1);
  EXPECT_EQ(plan.devices[1].cpuset, "1");
}

TEST(Planner, DeeperSwitchesChooseFirstAndFreeGpusArePreferred) {
  Topology topo = load("nested.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  // NIC 18 shares only the top switch with GPUs 15 and 17; 15 already has NIC 16, so 18 takes
  // 17. NIC 2b finds both its GPUs served and tops up the first group.
  EXPECT_EQ(summary(plan, nics),
            (std::vector<std::string>{"0000:15:00.0>0000:16:00.0", "0000:17:00.0>0000:18:00.0",
                                      "0000:25:00.0>0000:26:00.0,0000:2b:00.0",
                                      "0000:29:00.0>0000:2a:00.0"}));
}

TEST(Planner, VirtualAndUnknownNicsBecomeOneDeviceEach) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = {virtualNic("lo"), pciNic("ghost", "0000:e0:00.0"),
                           pciNic("rdmap19s0", "0000:13:00.0"), virtualNic("eth0")};
  Plan plan = planDevices(nics, &topo);
  EXPECT_EQ(summary(plan, nics), (std::vector<std::string>{"0000:15:00.0,0000:18:00.0>0000:13:00.0",
                                                           ">lo", ">0000:e0:00.0", ">eth0"}));
  EXPECT_EQ(plan.devices[1].placement, Placement::kNoPci);
  EXPECT_EQ(plan.devices[2].placement, Placement::kNoPci);
  EXPECT_FALSE(devicePciPath(plan.devices[1], nics, &topo));
}

TEST(Planner, WorksWithoutATopology) {
  std::vector<Nic> nics = {virtualNic("eth0"), pciNic("efa0", "0000:10:1b.0")};
  Plan plan = planDevices(nics, nullptr);
  EXPECT_EQ(summary(plan, nics), (std::vector<std::string>{">eth0", ">0000:10:1b.0"}));
  EXPECT_EQ(plan.devices[1].numaNode, -1);
}

TEST(Planner, ManualRailsGroupVirtualNics) {
  std::vector<Nic> nics = {virtualNic("lo"), virtualNic("veth0", 10000), virtualNic("veth1", 10000),
                           virtualNic("veth2", 10000)};
  Plan plan = planDevices(nics, nullptr, parseRailGroups("veth1,veth0;veth2;missing"));
  EXPECT_EQ(summary(plan, nics), (std::vector<std::string>{">veth1,veth0", ">veth2", ">lo"}));
  EXPECT_EQ(plan.devices[0].placement, Placement::kManual);
  EXPECT_EQ(deviceSpeedMbps(plan.devices[0], nics, SIZE_MAX), 20000);
  EXPECT_EQ(deviceName(plan.devices[0], nics), "veth1");
}

TEST(Planner, ManualRailsOverrideTopology) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo, parseRailGroups("rdmap19s0,rdmap22s0"));
  EXPECT_EQ(summary(plan, nics),
            (std::vector<std::string>{"0000:15:00.0>0000:14:00.0", "0000:18:00.0>0000:17:00.0",
                                      "0000:15:00.0,0000:18:00.0>0000:13:00.0,0000:16:00.0"}));
}

TEST(DeviceProps, SysfsPathRebuiltFromHwlocWhenSysHasNoDevice) {
  Topology topo = load("shared-switch.xml");
  PciAddress nic = *PciAddress::parse("0000:13:00.0");
  EXPECT_EQ(sysfsPciPath(nic, &topo, "/nonexistent-sys"),
            "/nonexistent-sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:00.0/"
            "0000:13:00.0");
  Topology flat = load("flat-hostbridge.xml");
  EXPECT_EQ(sysfsPciPath(*PciAddress::parse("0000:90:1b.0"), &flat, "/nonexistent-sys"),
            "/nonexistent-sys/devices/pci0000:90/0000:90:1b.0");
  // Unknown to hwloc too: the unresolved bus path, whose last component is the bus id.
  EXPECT_EQ(sysfsPciPath(*PciAddress::parse("0000:e0:00.0"), &flat, "/nonexistent-sys"),
            "/nonexistent-sys/bus/pci/devices/0000:e0:00.0");
}

TEST(DeviceProps, SysfsPathResolvesTheBusLink) {
  // A fake /sys whose bus link points into a devices tree, as Linux lays it out.
  std::string root = ::testing::TempDir() + "/topo-sys-" + std::to_string(getpid());
  std::string dev = root + "/devices/pci0000:44/0000:44:00.0/0000:4f:00.0";
  ASSERT_EQ(system(("mkdir -p " + dev + " " + root + "/bus/pci/devices").c_str()), 0);
  ASSERT_EQ(symlink("../../../devices/pci0000:44/0000:44:00.0/0000:4f:00.0",
                    (root + "/bus/pci/devices/0000:4f:00.0").c_str()),
            0);
  char resolved[PATH_MAX];
  ASSERT_NE(realpath(dev.c_str(), resolved), nullptr);
  EXPECT_EQ(sysfsPciPath(*PciAddress::parse("0000:4f:00.0"), nullptr, root), resolved);
  EXPECT_EQ(system(("rm -rf " + root).c_str()), 0);
}

TEST(DeviceProps, GuidsAreStableAndDistinct) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  uint64_t a = deviceGuid(plan.devices[0], nics, 0);
  uint64_t b = deviceGuid(plan.devices[1], nics, 1);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, deviceGuid(planDevices(nics, &topo).devices[0], nics, 0));
  // FNV-1a 64 of "0000:13:00.0#0": pinned so that a change is deliberate.
  EXPECT_EQ(a, 0x66fef638b829f040ULL);
}

TEST(NcclTopoXml, NeededOnlyWhenAGpuDeviceHasSeveralNics) {
  Topology shared = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(shared);
  EXPECT_TRUE(needsNcclTopoFile(planDevices(nics, &shared), SIZE_MAX));
  Topology flat = load("flat-hostbridge.xml");
  std::vector<Nic> flatNics = listEfaNics(flat);
  EXPECT_FALSE(needsNcclTopoFile(planDevices(flatNics, &flat), SIZE_MAX));
  Topology none = load("no-gpu.xml");
  std::vector<Nic> noneNics = listEfaNics(none);
  EXPECT_FALSE(needsNcclTopoFile(planDevices(noneNics, &none), SIZE_MAX));
}

TEST(NcclTopoXml, PlacesLeadersBesideTheirGpusUnderTheSwitch) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  char guid0[32], guid1[32];
  snprintf(guid0, sizeof(guid0), "0x%llx",
           (unsigned long long)deviceGuid(plan.devices[0], nics, 0));
  snprintf(guid1, sizeof(guid1), "0x%llx",
           (unsigned long long)deviceGuid(plan.devices[1], nics, 1));
  std::string expected =
      "<system version=\"1\">\n"
      "  <cpu numaid=\"0\">\n"
      "    <pci busid=\"0000:11:00.0\" class=\"0x060400\">\n"
      "      <pci busid=\"0000:15:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2335\"/>\n"
      "      <pci busid=\"0000:13:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa2\" "
      "link_speed=\"64.0 GT/s PCIe\" link_width=\"16\">\n"
      "        <nic><net name=\"rdmap19s0\" dev=\"0\" speed=\"400000\" port=\"1\" guid=\"" +
      std::string(guid0) +
      "\" gdr=\"1\"/></nic>\n"
      "      </pci>\n"
      "      <pci busid=\"0000:18:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2335\"/>\n"
      "      <pci busid=\"0000:16:00.0\" class=\"0x020000\" vendor=\"0x1d0f\" device=\"0xefa2\" "
      "link_speed=\"64.0 GT/s PCIe\" link_width=\"16\">\n"
      "        <nic><net name=\"rdmap22s0\" dev=\"1\" speed=\"400000\" port=\"1\" guid=\"" +
      std::string(guid1) +
      "\" gdr=\"1\"/></nic>\n"
      "      </pci>\n"
      "    </pci>\n"
      "  </cpu>\n"
      "</system>\n";
  EXPECT_EQ(ncclTopoXml(plan, nics, topo, true, SIZE_MAX), expected);
  EXPECT_NE(ncclTopoXml(plan, nics, topo, false, SIZE_MAX).find("gdr=\"0\""), std::string::npos);
}

TEST(NcclTopoXml, FlattenedHostBridgePutsDevicesUnderTheCpu) {
  Topology topo = load("flat-hostbridge.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  std::string xml = ncclTopoXml(planDevices(nics, &topo), nics, topo, true, SIZE_MAX);
  EXPECT_NE(xml.find("  <cpu numaid=\"1\">\n    <pci busid=\"0000:90:1c.0\""), std::string::npos)
      << xml;
  // Single-NIC devices keep the NIC's real link: NCCL reads it from sysfs.
  EXPECT_EQ(xml.find("link_speed"), std::string::npos) << xml;
}

TEST(NcclTopoXml, ExportRespectsTheUsersFile) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);

  setenv("NCCL_TOPO_FILE", "/users/own.xml", 1);
  EXPECT_EQ(exportNcclTopoFile(plan, nics, topo, true, SIZE_MAX), "");
  EXPECT_STREQ(getenv("NCCL_TOPO_FILE"), "/users/own.xml");
  unsetenv("NCCL_TOPO_FILE");

  Topology flat = load("flat-hostbridge.xml");
  std::vector<Nic> flatNics = listEfaNics(flat);
  EXPECT_EQ(exportNcclTopoFile(planDevices(flatNics, &flat), flatNics, flat, true, SIZE_MAX), "");
  EXPECT_EQ(getenv("NCCL_TOPO_FILE"), nullptr);
}

// The file lives in memory (memfd) and goes with the process: nothing is written to disk.
TEST(NcclTopoXml, ExportLeavesNoFileBehind) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  unsetenv("NCCL_TOPO_FILE");
  std::string path = exportNcclTopoFile(plan, nics, topo, false, SIZE_MAX);
  ASSERT_EQ(path.rfind("/proc/self/fd/", 0), 0u) << path;
  EXPECT_STREQ(getenv("NCCL_TOPO_FILE"), path.c_str());
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str(), ncclTopoXml(plan, nics, topo, false, SIZE_MAX));
  EXPECT_NE(content.str().find("gdr=\"0\""), std::string::npos);
  char target[256] = {};
  ASSERT_GT(readlink(path.c_str(), target, sizeof(target) - 1), 0);
  EXPECT_EQ(std::string(target).rfind("/memfd:", 0), 0u) << target;

  // A child that inherited the variable but closed the descriptor writes its own.
  close(std::stoi(path.substr(strlen("/proc/self/fd/"))));
  std::string again = exportNcclTopoFile(plan, nics, topo, true, SIZE_MAX);
  ASSERT_FALSE(again.empty());
  EXPECT_STREQ(getenv("NCCL_TOPO_FILE"), again.c_str());
  close(std::stoi(again.substr(strlen("/proc/self/fd/"))));
  unsetenv("NCCL_TOPO_FILE");
}

// Until the protocol drives every rail, the device reports (and the file places) what its
// leader carries: no multi-NIC link to describe, so no file at all.
TEST(NcclTopoXml, LeaderOnlyDevicesNeedNoFileAndReportOneNic) {
  Topology topo = load("shared-switch.xml");
  std::vector<Nic> nics = listEfaNics(topo);
  Plan plan = planDevices(nics, &topo);
  ASSERT_GT(plan.devices[0].nics.size(), 1u);
  EXPECT_TRUE(needsNcclTopoFile(plan, SIZE_MAX));
  EXPECT_FALSE(needsNcclTopoFile(plan, 1));
  EXPECT_EQ(deviceSpeedMbps(plan.devices[0], nics, 1), nics[plan.devices[0].nics[0]].speedMbps);
  unsetenv("NCCL_TOPO_FILE");
  EXPECT_EQ(exportNcclTopoFile(plan, nics, topo, true, 1), "");
  EXPECT_EQ(getenv("NCCL_TOPO_FILE"), nullptr);
}

}  // namespace
}  // namespace nnf::topology
