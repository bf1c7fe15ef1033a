#include "support/test_env.h"

#include <cstdlib>
#include <sys/stat.h>

namespace nnf::test {

std::string sharedFixturesDir() {
  const char* env = std::getenv("NNF_SHARED_FIXTURES");
  std::string dir = env != nullptr ? env : NNF_SHARED_FIXTURES_DIR;
  struct stat info;
  if (stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return "";
  return dir;
}

std::string sourceDir() { return NNF_SOURCE_DIR; }

}  // namespace nnf::test
