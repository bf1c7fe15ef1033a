// Pure parsers of the topology layer: PCI addresses, manual rail groups, EFA ids.
#include <gtest/gtest.h>

#include "config/config.h"
#include "topology/efa.h"
#include "topology/pci_address.h"
#include "topology/rails.h"

namespace nnf::topology {
namespace {

TEST(PciAddress, ParsesFullForm) {
  auto addr = PciAddress::parse("0000:4f:00.0");
  ASSERT_TRUE(addr);
  EXPECT_EQ(addr->domain, 0u);
  EXPECT_EQ(addr->bus, 0x4fu);
  EXPECT_EQ(addr->device, 0u);
  EXPECT_EQ(addr->function, 0u);
  EXPECT_EQ(addr->str(), "0000:4f:00.0");
}

TEST(PciAddress, FormatsLowercaseAndAcceptsUppercase) {
  auto addr = PciAddress::parse("0001:A4:1F.7");
  ASSERT_TRUE(addr);
  EXPECT_EQ(addr->domain, 1u);
  EXPECT_EQ(addr->bus, 0xa4u);
  EXPECT_EQ(addr->device, 0x1fu);
  EXPECT_EQ(addr->function, 7u);
  EXPECT_EQ(addr->str(), "0001:a4:1f.7");
}

TEST(PciAddress, DomainlessMeansDomainZero) {
  auto addr = PciAddress::parse("10:1b.0");
  ASSERT_TRUE(addr);
  EXPECT_EQ(addr->str(), "0000:10:1b.0");
}

TEST(PciAddress, RejectsMalformed) {
  for (const char* bad :
       {"", "0000:4f:00", "0000:4f:00.", "0000:4f:20.0", "0000:4f:00.8", "000:4f:00.0",
        "0000:4f:00.0 ", "0000:4g:00.0", "0000:4f.00.0", "0000:0000:4f:00.0", "4f:00"}) {
    EXPECT_FALSE(PciAddress::parse(bad)) << bad;
  }
}

TEST(PciAddress, OrdersByDomainBusDeviceFunction) {
  EXPECT_LT(*PciAddress::parse("0000:4f:00.0"), *PciAddress::parse("0000:50:00.0"));
  EXPECT_LT(*PciAddress::parse("0000:ff:1f.7"), *PciAddress::parse("0001:00:00.0"));
  EXPECT_LT(*PciAddress::parse("0000:10:1b.0"), *PciAddress::parse("0000:10:1c.0"));
  EXPECT_EQ(*PciAddress::parse("0000:10:1b.0"), *PciAddress::parse("10:1b.0"));
}

TEST(RailGroups, ParsesGroupsAndNames) {
  RailGroups groups = parseRailGroups("eth0,eth1;eth2");
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0], (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(groups[1], (std::vector<std::string>{"eth2"}));
  EXPECT_EQ(formatRailGroups(groups), "eth0,eth1;eth2");
}

TEST(RailGroups, IgnoresBlanksAroundNames) {
  RailGroups groups = parseRailGroups(" veth0 , veth1 ; veth2 ");
  EXPECT_EQ(formatRailGroups(groups), "veth0,veth1;veth2");
}

TEST(RailGroups, EmptyMeansNoGrouping) {
  EXPECT_TRUE(parseRailGroups("").empty());
  EXPECT_TRUE(parseRailGroups("   ").empty());
}

TEST(RailGroups, MalformedThrowsNamingTheVariable) {
  for (const char* bad : {";", "eth0;", ";eth0", "eth0,,eth1", "eth0,", "eth0;;eth1", "eth0,eth0",
                          "eth0;eth1,eth0", "eth 0"}) {
    try {
      parseRailGroups(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const config::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("NCCL_FABRIC_RAILS=\""), std::string::npos) << e.what();
    }
  }
}

TEST(RailGroups, IsAConfigurationParameter) {
  config::Config cfg = config::Config::load([](const char* name) -> const char* {
    return std::string(name) == "NCCL_FABRIC_RAILS" ? "eth0,eth1;eth2" : nullptr;
  });
  EXPECT_EQ(cfg.string(config::Param::kRails), "eth0,eth1;eth2");
  EXPECT_TRUE(cfg.userSet(config::Param::kRails));
}

TEST(Efa, RecognisesEfaButNotEna) {
  EXPECT_TRUE(isEfaDevice(0x1d0f, 0xefa0));
  EXPECT_TRUE(isEfaDevice(0x1d0f, 0xefa1));
  EXPECT_TRUE(isEfaDevice(0x1d0f, 0xefa2));
  EXPECT_TRUE(isEfaDevice(0x1d0f, 0xefa3));
  EXPECT_TRUE(isEfaDevice(0x1d0f, 0xefaf));
  EXPECT_FALSE(isEfaDevice(0x1d0f, 0xec20));  // ENA
  EXPECT_FALSE(isEfaDevice(0x1d0f, 0xefb0));
  EXPECT_FALSE(isEfaDevice(0x10de, 0xefa0));
}

TEST(Efa, SpeedByGeneration) {
  EXPECT_EQ(efaSpeedMbps(0xefa0), 100000);
  EXPECT_EQ(efaSpeedMbps(0xefa1), 100000);
  EXPECT_EQ(efaSpeedMbps(0xefa2), 200000);
  EXPECT_EQ(efaSpeedMbps(0xefa3), 400000);
}

}  // namespace
}  // namespace nnf::topology
