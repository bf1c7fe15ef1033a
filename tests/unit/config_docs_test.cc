// Every parameter of the table is documented in docs/configuration.md (and nothing documented
// there as ours is missing from the table).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "config/config.h"
#include "support/test_env.h"

namespace nnf::config {
namespace {

std::string readDoc() {
  std::ifstream file(test::sourceDir() + "/docs/configuration.md");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(ConfigurationDoc, ListsEveryParameterWithItsDefault) {
  std::string doc = readDoc();
  ASSERT_FALSE(doc.empty()) << "docs/configuration.md is missing";
  for (const ParamSpec& param : table()) {
    std::string row = std::string("| `") + param.envName + "` | " + typeName(param.type) + " | `" +
                      param.defaultValue + "` |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/configuration.md lacks the row " << row;
  }
}

TEST(ConfigurationDoc, DocumentsNothingTheTableLacks) {
  std::string doc = readDoc();
  std::set<std::string> known;
  for (const ParamSpec& param : table()) known.insert(param.envName);
  std::regex variable("`(NCCL_FABRIC_[A-Z0-9_]+)`");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), variable);
       it != std::sregex_iterator(); ++it) {
    EXPECT_TRUE(known.count((*it)[1].str()))
        << (*it)[1].str() << " is documented but not a parameter";
  }
}

}  // namespace
}  // namespace nnf::config
