#include "support/fake_rdma_run.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "log/log.h"
#include "protocol/rdma_wire.h"

namespace nnf::test {
namespace {

// The logger is a plain function (NCCL's type): its counts live here, reset by each WarnCounter.
int g_truncations = 0;
int g_others = 0;

void countingLogger(abi::LogLevel level, unsigned long /*flags*/, const char* /*file*/,
                    int /*line*/, const char* fmt, ...) {
  static const bool infoShown = getenv("NNF_FAKE_SHOW_INFO") != nullptr;  // for debugging
  if (level != abi::kLogWarn && !(infoShown && level == abi::kLogInfo)) return;
  va_list args;
  va_start(args, fmt);
  const char* text = va_arg(args, const char*);  // log::write passes "%s", text
  va_end(args);
  if (level != abi::kLogWarn) {
    fprintf(stderr, "INFO %s\n", text);
    return;
  }
  if (strstr(text, "receive truncated") != nullptr || strstr(text, "does not fit") != nullptr) {
    ++g_truncations;
    return;
  }
  ++g_others;
  fprintf(stderr, "WARN %s\n", text);
}

}  // namespace

std::vector<FakeFamily> fakeFamilies() {
  return {
      {"shm", FakeRailSpec::shm(), 1, 4096},
      {"tcp", FakeRailSpec::tcp(), 1, 8192},
      {"efa", FakeRailSpec::efa(), 1, 8192},
      {"efa2rails", FakeRailSpec::efa(), 2, 8192},
  };
}

std::string familyName(const ::testing::TestParamInfo<FakeFamily>& info) {
  return info.param.name;
}

FakePlugin::Options fakeOptions(const FakeFamily& family, uint64_t seed) {
  FakePlugin::Options options;
  options.rail = family.rail;
  options.rail.maxRmaBytes = 40960;
  options.rails = family.rails;
  options.fabric.seed = seed;
  options.fabric.inOrder = family.rail.deliversInOrder;
  options.fabric.holdOneIn = 64;
  options.settings = {
      {"NCCL_FABRIC_CLOSE_TIMEOUT_MS", "5000"},
      {"NCCL_FABRIC_MR_CACHE", "0"},
      {"NCCL_FABRIC_STRIPE_MIN", "65536"},
      {"NCCL_FABRIC_SEQUENCE_START", "63536"},
  };
  return options;
}

WarnCounter::WarnCounter() {
  g_truncations = 0;
  g_others = 0;
  log::setLogger(countingLogger);
}

WarnCounter::~WarnCounter() {
  log::setLogger(nullptr);
}

int WarnCounter::truncations() const {
  return g_truncations;
}
int WarnCounter::others() const {
  return g_others;
}

void countWrites(FakeFabric& fabric, WriteCounts* counts) {
  fabric.onWrite([counts](uint64_t data, size_t) {
    protocol::rdma::Immediate imm = protocol::rdma::decode(data);
    switch (imm.kind) {
      case protocol::rdma::ImmKind::kData:
        ++(imm.segments == 0 ? counts->notices : counts->segments);
        break;
      case protocol::rdma::ImmKind::kEager:
      case protocol::rdma::ImmKind::kEagerImplied:
        ++counts->eager;
        break;
      case protocol::rdma::ImmKind::kDescriptors:
        ++counts->descriptors;
        break;
      case protocol::rdma::ImmKind::kVoid:
        ++counts->voids;
        break;
      case protocol::rdma::ImmKind::kCredits:
        ++counts->credits;
        break;
      default:
        break;
    }
  });
}

}  // namespace nnf::test
