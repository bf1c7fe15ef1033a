// The GPUDirect policy table (ptrSupport) and the iflush decision.
#include "memory/gdr_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "nccl_net/net.h"
#include "config/config.h"

namespace nnf::memory {
namespace {

struct PtrRow {
  bool hmem;
  bool cuda;
  bool dmabuf;
  GdrMode mode;
  int bits;
  const char* reasonWord;
};

TEST(PtrSupport, Table) {
  const int host = abi::kPtrHost;
  const int hostCuda = abi::kPtrHost | abi::kPtrCuda;
  const int all = abi::kPtrHost | abi::kPtrCuda | abi::kPtrDmaBuf;
  const PtrRow rows[] = {
      {false, false, false, GdrMode::kAuto, host, "FI_HMEM"},
      {false, true, true, GdrMode::kAuto, host, "FI_HMEM"},
      {true, false, true, GdrMode::kAuto, host, "CUDA driver"},
      {true, true, false, GdrMode::kAuto, hostCuda, "registered by address"},
      {true, true, true, GdrMode::kAuto, all, "DMA-BUF"},
      {true, true, true, GdrMode::kOff, host, "NCCL_FABRIC_GDR=off"},
      {true, true, false, GdrMode::kOff, host, "NCCL_FABRIC_GDR=off"},
      {false, false, true, GdrMode::kOff, host, "NCCL_FABRIC_GDR=off"},
  };
  for (const PtrRow& row : rows) {
    PtrSupportInputs inputs;
    inputs.providerHmem = row.hmem;
    inputs.cudaUsable = row.cuda;
    inputs.dmaBuf = row.dmabuf;
    inputs.mode = row.mode;
    PtrSupport result = decidePtrSupport(inputs);
    SCOPED_TRACE(testing::Message() << "hmem=" << row.hmem << " cuda=" << row.cuda << " dmabuf="
                                    << row.dmabuf << " off=" << (row.mode == GdrMode::kOff));
    EXPECT_EQ(result.bits, row.bits);
    EXPECT_NE(result.reason.find(row.reasonWord), std::string::npos) << result.reason;
  }
}

struct FlushRow {
  MemType type;
  size_t bytes;
  FlushSetting setting;
  bool read;
  bool cudaFlush;
  FlushMethod method;
};

TEST(Flush, Table) {
  const FlushRow rows[] = {
      // Host memory and empty receives never need a flush, whatever the setting.
      {MemType::kHost, 4096, FlushSetting::kRead, true, true, FlushMethod::kNone},
      {MemType::kHost, 4096, FlushSetting::kCuda, true, true, FlushMethod::kNone},
      {MemType::kCuda, 0, FlushSetting::kRead, true, true, FlushMethod::kNone},
      {MemType::kDmaBuf, 0, FlushSetting::kCuda, true, true, FlushMethod::kNone},
      // GPU memory: the setting decides, falling back to the other method when one is missing.
      {MemType::kCuda, 1, FlushSetting::kRead, true, true, FlushMethod::kRdmaRead},
      {MemType::kCuda, 1, FlushSetting::kRead, false, true, FlushMethod::kCuda},
      {MemType::kCuda, 1, FlushSetting::kRead, false, false, FlushMethod::kNone},
      {MemType::kCuda, 1 << 20, FlushSetting::kCuda, true, true, FlushMethod::kCuda},
      {MemType::kCuda, 1 << 20, FlushSetting::kCuda, true, false, FlushMethod::kRdmaRead},
      {MemType::kCuda, 1 << 20, FlushSetting::kCuda, false, false, FlushMethod::kNone},
      {MemType::kDmaBuf, 64, FlushSetting::kRead, true, false, FlushMethod::kRdmaRead},
      {MemType::kCuda, 64, FlushSetting::kOff, true, true, FlushMethod::kNone},
  };
  int index = 0;
  for (const FlushRow& row : rows) {
    FlushInputs inputs;
    inputs.type = row.type;
    inputs.bytes = row.bytes;
    inputs.setting = row.setting;
    inputs.providerRead = row.read;
    inputs.cudaFlush = row.cudaFlush;
    FlushDecision decision = decideFlush(inputs);
    EXPECT_EQ(decision.method, row.method) << "row " << index << ": " << decision.reason;
    EXPECT_NE(decision.reason[0], '\0') << "row " << index;
    ++index;
  }
}

TEST(GdrConfig, SettingsFromConfiguration) {
  std::map<std::string, std::string> env;
  auto load = [&] {
    return config::Config::load([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  EXPECT_EQ(gdrModeFromConfig(load()), GdrMode::kAuto);
  EXPECT_EQ(flushSettingFromConfig(load()), FlushSetting::kRead);
  env["NCCL_FABRIC_GDR"] = "off";
  env["NCCL_FABRIC_GDR_FLUSH"] = "cuda";
  EXPECT_EQ(gdrModeFromConfig(load()), GdrMode::kOff);
  EXPECT_EQ(flushSettingFromConfig(load()), FlushSetting::kCuda);
  env["NCCL_FABRIC_GDR_FLUSH"] = "off";
  EXPECT_EQ(flushSettingFromConfig(load()), FlushSetting::kOff);
  env["NCCL_FABRIC_GDR_FLUSH"] = "sometimes";
  EXPECT_THROW(load(), config::ConfigError);
}

}  // namespace
}  // namespace nnf::memory
