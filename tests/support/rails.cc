#include "support/rails.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

namespace nnf::test {

double minRailShare() {
  return std::min(0.25, 0.8 / testRails());
}

std::map<std::string, uint64_t> carriedByRail() {
  std::map<std::string, uint64_t> carried;
  EXPECT_TRUE(writeEfaRulesStats()) << "the EFA-rules provider is not loaded here, or "
                                    << "NNF_EFA_RULES_STATS is unset";
  std::map<std::string, EfaRulesTraffic> traffic = readEfaRulesStats(efaRulesStats(), getpid());
  for (int rail = 0; rail < testRails(); ++rail) {
    const EfaRulesTraffic& t = traffic[efaRulesDomainName(rail)];
    carried[efaRulesDomainName(rail)] = t.written + t.sent;
  }
  return carried;
}

::testing::AssertionResult everyRailCarried(const std::map<std::string, uint64_t>& before,
                                            const std::map<std::string, uint64_t>& after,
                                            uint64_t payload) {
  std::ostringstream shares;
  bool ok = true;
  for (const auto& [rail, bytes] : after) {
    uint64_t delta = bytes - before.at(rail);
    shares << " " << rail << "=" << delta;
    if (static_cast<double>(delta) < minRailShare() * static_cast<double>(payload)) ok = false;
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "a rail carried less than " << minRailShare() * 100 << "% of " << payload
         << " payload bytes; bytes carried per rail:" << shares.str();
}

}  // namespace nnf::test
