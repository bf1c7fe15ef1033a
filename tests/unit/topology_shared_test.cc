// Plans for real EC2 machines from their `lstopo` dumps (../shared/fixtures/hwloc), with the EFA
// NICs of each dump as the NIC list (the topology layer alone; fabric-net-info --topology runs
// the plugin's whole plan on them: tests/tools/info_plan_test.cc).
#include <gtest/gtest.h>

#include "support/test_env.h"
#include "topology/device_props.h"
#include "topology/efa.h"
#include "topology/hwloc_topology.h"
#include "topology/nccl_topo_xml.h"
#include "topology/planner.h"

namespace nnf::topology {
namespace {

class SharedDumps : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::sharedFixturesDir();
    if (dir_.empty()) GTEST_SKIP() << "../shared/fixtures is absent: real hwloc dumps not tested";
  }

  // Loads the dump and plans its EFA NICs into topo_, nics_ and plan_.
  void planFor(const std::string& file) {
    topo_ = std::make_unique<Topology>(Topology::fromXmlFile(dir_ + "/hwloc/" + file));
    nics_ = listEfaNics(*topo_);
    plan_ = planDevices(nics_, topo_.get());
  }

  std::vector<std::string> gpusOf(size_t d) const {
    std::vector<std::string> out;
    for (const PciAddress& gpu : plan_.devices.at(d).gpus) out.push_back(gpu.str());
    return out;
  }
  std::vector<std::string> nicsOf(size_t d) const {
    std::vector<std::string> out;
    for (size_t nic : plan_.devices.at(d).nics) out.push_back(nics_[nic].pci->str());
    return out;
  }
  void expectEveryDevice(size_t gpus, size_t nicCount, Placement placement) const {
    for (size_t d = 0; d < plan_.devices.size(); ++d) {
      EXPECT_EQ(plan_.devices[d].gpus.size(), gpus) << "device " << d;
      EXPECT_EQ(plan_.devices[d].nics.size(), nicCount) << "device " << d;
      EXPECT_EQ(plan_.devices[d].placement, placement) << "device " << d;
    }
  }

  std::string dir_;
  std::unique_ptr<Topology> topo_;
  std::vector<Nic> nics_;
  Plan plan_;
};

TEST_F(SharedDumps, P5GivesEightDevicesOfFourNics) {
  planFor("p5.48xl-topo.xml");
  ASSERT_EQ(topo_->gpus().size(), 8u);
  ASSERT_EQ(nics_.size(), 32u);
  ASSERT_EQ(plan_.devices.size(), 8u);
  expectEveryDevice(1, 4, Placement::kGpu);
  EXPECT_EQ(gpusOf(0), (std::vector<std::string>{"0000:53:00.0"}));
  EXPECT_EQ(nicsOf(0), (std::vector<std::string>{"0000:4f:00.0", "0000:50:00.0", "0000:51:00.0",
                                                 "0000:52:00.0"}));
  EXPECT_EQ(gpusOf(7), (std::vector<std::string>{"0000:ca:00.0"}));
  EXPECT_EQ(nicsOf(7), (std::vector<std::string>{"0000:c6:00.0", "0000:c7:00.0", "0000:c8:00.0",
                                                 "0000:c9:00.0"}));
  EXPECT_EQ(deviceName(plan_.devices[0], nics_), "rdmap79s0");
  EXPECT_EQ(deviceSpeedMbps(plan_.devices[0], nics_, SIZE_MAX), 400000);
  EXPECT_EQ(plan_.devices[0].numaNode, 0);
  EXPECT_EQ(plan_.devices[4].numaNode, 1);
  EXPECT_EQ(sysfsPciPath(*nics_[0].pci, topo_.get(), "/nonexistent-sys"),
            "/nonexistent-sys/devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.0/"
            "0000:4f:00.0");
  EXPECT_TRUE(needsNcclTopoFile(plan_, SIZE_MAX));
  std::string xml = ncclTopoXml(plan_, nics_, *topo_, true, SIZE_MAX);
  EXPECT_NE(xml.find("<pci busid=\"0000:45:00.0\" class=\"0x060400\">\n"
                     "      <pci busid=\"0000:53:00.0\""),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<net name=\"rdmap79s0\" dev=\"0\" speed=\"400000\""), std::string::npos);
  EXPECT_NE(xml.find("<cpu numaid=\"1\">"), std::string::npos);
}

TEST_F(SharedDumps, P5enGivesEightDevicesOfTwoNics) {
  planFor("p5en.48xl-topo.xml");
  ASSERT_EQ(nics_.size(), 16u);
  ASSERT_EQ(plan_.devices.size(), 8u);
  expectEveryDevice(1, 2, Placement::kGpu);
  // Two GPUs and four NICs share each switch: split 2 + 2 in PCI order.
  EXPECT_EQ(gpusOf(0), (std::vector<std::string>{"0000:59:00.0"}));
  EXPECT_EQ(nicsOf(0), (std::vector<std::string>{"0000:55:00.0", "0000:56:00.0"}));
  EXPECT_EQ(gpusOf(1), (std::vector<std::string>{"0000:5a:00.0"}));
  EXPECT_EQ(nicsOf(1), (std::vector<std::string>{"0000:57:00.0", "0000:58:00.0"}));
  EXPECT_EQ(deviceSpeedMbps(plan_.devices[0], nics_, SIZE_MAX), 400000);
  EXPECT_TRUE(needsNcclTopoFile(plan_, SIZE_MAX));
}

TEST_F(SharedDumps, P6B200GivesEightDevicesOfOneNic) {
  planFor("p6-b200.48xl-topo.xml");
  ASSERT_EQ(nics_.size(), 8u);
  ASSERT_EQ(plan_.devices.size(), 8u);
  expectEveryDevice(1, 1, Placement::kGpu);
  EXPECT_EQ(gpusOf(0), (std::vector<std::string>{"0000:51:00.0"}));
  EXPECT_EQ(nicsOf(0), (std::vector<std::string>{"0000:4f:00.0"}));
  EXPECT_EQ(gpusOf(1), (std::vector<std::string>{"0000:52:00.0"}));
  EXPECT_EQ(nicsOf(1), (std::vector<std::string>{"0000:50:00.0"}));
  EXPECT_EQ(deviceSpeedMbps(plan_.devices[0], nics_, SIZE_MAX), 400000);
  EXPECT_FALSE(needsNcclTopoFile(plan_, SIZE_MAX));
}

TEST_F(SharedDumps, P4dGivesFourDevicesEachServingTwoGpus) {
  // The hypervisor flattens switches: each host bridge holds one NIC and two GPUs.
  planFor("p4d.24xl-topo.xml");
  ASSERT_EQ(plan_.devices.size(), 4u);
  expectEveryDevice(2, 1, Placement::kGpu);
  EXPECT_EQ(gpusOf(0), (std::vector<std::string>{"0000:10:1c.0", "0000:10:1d.0"}));
  EXPECT_EQ(nicsOf(0), (std::vector<std::string>{"0000:10:1b.0"}));
  EXPECT_EQ(gpusOf(3), (std::vector<std::string>{"0000:a0:1c.0", "0000:a0:1d.0"}));
  EXPECT_EQ(nicsOf(3), (std::vector<std::string>{"0000:a0:1b.0"}));
  EXPECT_FALSE(needsNcclTopoFile(plan_, SIZE_MAX));
}

TEST_F(SharedDumps, P3dnAndG5OneNicServesAllEightGpus) {
  for (const char* file : {"p3dn.24xl-topo.xml", "g5.48xl-topo.xml"}) {
    SCOPED_TRACE(file);
    planFor(file);
    ASSERT_EQ(plan_.devices.size(), 1u);
    expectEveryDevice(8, 1, Placement::kGpu);
    EXPECT_EQ(nicsOf(0), (std::vector<std::string>{"0000:00:15.0"}));
    EXPECT_EQ(gpusOf(0).front(), "0000:00:16.0");
    EXPECT_EQ(gpusOf(0).back(), "0000:00:1d.0");
    EXPECT_EQ(plan_.devices[0].numaNode, -1);  // the host bridge hangs off the machine
  }
}

TEST_F(SharedDumps, G6NicIsCloseToNoGpu) {
  // The NIC's host bridge and every GPU's meet only at the package.
  planFor("g6.48xl-topo.xml");
  ASSERT_EQ(topo_->gpus().size(), 8u);
  ASSERT_EQ(plan_.devices.size(), 1u);
  expectEveryDevice(0, 1, Placement::kNoGpu);
  EXPECT_EQ(nicsOf(0), (std::vector<std::string>{"0000:96:00.0"}));
  EXPECT_EQ(plan_.devices[0].numaNode, 0);
}

TEST_F(SharedDumps, C5nHasNoGpu) {
  planFor("c5n.18xl-topo.xml");
  ASSERT_TRUE(topo_->gpus().empty());
  ASSERT_EQ(plan_.devices.size(), 1u);
  expectEveryDevice(0, 1, Placement::kNoGpu);
  EXPECT_EQ(nicsOf(0), (std::vector<std::string>{"0000:00:1f.0"}));
  EXPECT_EQ(deviceName(plan_.devices[0], nics_), "rdmap0s31");
}

}  // namespace
}  // namespace nnf::topology
