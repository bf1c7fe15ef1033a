#include "gpu/ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace nnf::test::gpu {
namespace {

constexpr char kVariable[] = "NNF_GPU_CHECK_LEDGER";

// One write per line with O_APPEND: lines of concurrent processes never interleave.
void append(const std::string& line) {
  const char* path = std::getenv(kVariable);
  if (path == nullptr || *path == '\0') return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t written = write(fd, line.data(), line.size());
  (void)written;
  close(fd);
}

const char* kindName(Moved kind) {
  switch (kind) {
    case Moved::kGpuToGpu:
      return "gpu-gpu";
    case Moved::kGpuToHost:
      return "gpu-host";
    case Moved::kHostToGpu:
      return "host-gpu";
  }
  return "?";
}

}  // namespace

void startLedger() {
  std::string path = "/tmp/nnf-gpu-check-" + std::to_string(getpid()) + ".ledger";
  unlink(path.c_str());
  setenv(kVariable, path.c_str(), 1);
}

void recordExpected(Moved kind, uint64_t bytes) {
  append(std::string("expected ") + kindName(kind) + " " + std::to_string(bytes) + "\n");
}

void recordVerified(Moved kind, uint64_t bytes) {
  append(std::string("verified ") + kindName(kind) + " " + std::to_string(bytes) + "\n");
}

LedgerTotals readLedger() {
  LedgerTotals totals;
  const char* path = std::getenv(kVariable);
  if (path == nullptr) return totals;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string what;
    fields >> what;
    if (what == "expected") {
      std::string kind;
      uint64_t bytes = 0;
      fields >> kind >> bytes;
      totals.expected += bytes;
    } else if (what == "verified") {
      std::string kind;
      uint64_t bytes = 0;
      fields >> kind >> bytes;
      totals.verified += bytes;
      if (kind == "gpu-gpu") {
        totals.gpuToGpu += bytes;
        if (bytes > 0) ++totals.gpuMessages;
      } else if (kind == "gpu-host") {
        totals.gpuToHost += bytes;
      } else if (kind == "host-gpu") {
        totals.hostToGpu += bytes;
      }
    } else if (what == "failure") {
      std::string rest;
      std::getline(fields, rest);
      totals.failures.push_back(rest.empty() ? rest : rest.substr(1));
    }
  }
  return totals;
}

void FailureRecorder::OnTestStart(const ::testing::TestInfo& test) {
  test_ = std::string(test.test_suite_name()) + "." + test.name();
}

void FailureRecorder::OnTestPartResult(const ::testing::TestPartResult& result) {
  if (!result.failed()) return;
  // ASSERT_NO_FATAL_FAILURE's own line repeats a failure already recorded.
  if (std::string(result.message()).find("doesn't generate new fatal failures") !=
      std::string::npos)
    return;
  std::string text = result.message() != nullptr ? result.message() : "";
  // The reason is the last line gtest did not write itself (a streamed message); without one,
  // the first line.
  std::string reason;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line == "Google Test trace:") break;  // SCOPED_TRACE's lines follow
    if (line.empty()) continue;
    if (reason.empty()) reason = line;
    bool boilerplate = line[0] == ' ' || line.rfind("Value of", 0) == 0 ||
                       line.rfind("Expected", 0) == 0 || line.rfind("Which is", 0) == 0;
    if (!boilerplate) reason = line;
  }
  append("failure " + test_ + ": " + reason + "\n");
}

}  // namespace nnf::test::gpu
