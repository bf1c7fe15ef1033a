// Writes the seed corpus (tests/fuzz/corpus/) from the real encoders, so that the fuzzers start
// from valid messages and mutate their way into the checks. The configuration seeds come from
// the parameter table, so a new row cannot leave them stale. Run by scripts/ci-fuzz.sh
// --refresh-seeds (or the nnf_fuzz_make_seeds target of any build); the output is committed, and
// tests/unit/fuzz_seeds_test.cc checks that every committed seed is valid.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/tags.h"
#include "core/wire.h"
#include "env_input.h"
#include "handle_input.h"

namespace nnf::test {
namespace {

void writeFile(const std::string& path, const void* data, size_t size) {
  FILE* file = fopen(path.c_str(), "wb");
  if (file == nullptr) {
    perror(path.c_str());
    exit(1);
  }
  fwrite(data, 1, size, file);
  fclose(file);
}

// A valid handle of the provider that `control` (handle_input.h) picks, after the control byte.
// `moreRails`: the listener's rails beyond the leader, each at `address` (as many as fit).
void writeHandle(const std::string& path, uint8_t control, uint32_t listenerId,
                 const uint8_t* address, size_t addressLength, size_t moreRails = 0) {
  const uint8_t* more[core::wire::kMaxRails - 1] = {address, address, address};
  core::wire::ListenHandle handle = core::wire::makeListenHandle(
      listenerId, handle_input::provider(control), address, addressLength, more, moreRails);
  std::vector<uint8_t> bytes(1 + sizeof(handle));
  bytes[0] = control;
  memcpy(bytes.data() + 1, &handle, sizeof(handle));
  writeFile(path, bytes.data(), bytes.size());
}

enum class Pick { kDefault, kLow, kHigh, kUnset };

// A valid value of `spec` (kept alive in `storage`): its default, the low or high end of its
// range or choices, or nullptr for unset.
const char* pickValue(const config::ParamSpec& spec, Pick pick, std::string* storage) {
  if (pick == Pick::kUnset) return nullptr;
  if (pick == Pick::kDefault) return spec.defaultValue;
  const bool low = pick == Pick::kLow;
  const std::string constraint = spec.constraint;
  switch (spec.type) {
    case config::Type::kBool:
      *storage = low ? "off" : "TRUE";
      break;
    case config::Type::kInt:
    case config::Type::kSize: {
      size_t dots = constraint.find("..");
      if (dots != std::string::npos) {
        *storage = low ? constraint.substr(0, dots) : constraint.substr(dots + 2);
      } else {
        *storage = low ? "0" : (spec.type == config::Type::kSize ? "3GiB" : "65536");
      }
      break;
    }
    case config::Type::kEnum: {
      size_t bar = low ? constraint.find('|') : constraint.rfind('|');
      *storage = bar == std::string::npos ? constraint
                 : low                    ? constraint.substr(0, bar)
                                          : constraint.substr(bar + 1);
      break;
    }
    case config::Type::kString:
      *storage = low ? "" : "fuzz,seed;value";
      break;
  }
  return storage->c_str();
}

std::string environment(Pick pick) {
  const auto& table = config::table();
  std::vector<std::string> storage(table.size());
  std::vector<const char*> values;
  for (size_t i = 0; i < table.size(); ++i)
    values.push_back(pickValue(table[i], pick, &storage[i]));
  return EnvInput::encode(values);
}

void writeEnv(const std::string& path, const std::string& env) {
  std::string bytes = "\003" + env;  // control byte 3: a whole environment
  writeFile(path, bytes.data(), bytes.size());
}

int run(const std::string& root) {
  // Address sizes as the providers produce them: shm names, a sockaddr_in, a sockaddr_in6.
  uint8_t address[core::wire::kMaxAddressLength];
  for (size_t i = 0; i < sizeof(address); ++i) address[i] = static_cast<uint8_t>(i * 7 + 1);
  for (const char* dir : {"listen_handle", "connect_message", "accept_message", "config"}) {
    mkdir((root + "/" + dir).c_str(), 0755);
  }
  // Valid handles for each provider the control byte can pick; half of them with the flags that
  // keep mutated handles past the hash and checksum checks.
  const uint8_t reach = handle_input::kStampHash | handle_input::kReseal;
  writeHandle(root + "/listen_handle/tcp_16", 0, 3, address, 16);
  writeHandle(root + "/listen_handle/shm_64", 1 | reach, 1, address, 64);
  writeHandle(root + "/listen_handle/efa_32", 2 | reach, core::tags::kMaxCommId, address, 32);
  writeHandle(root + "/listen_handle/efa_32_three_rails", 2 | reach, 4, address, 32, 3);
  writeHandle(root + "/listen_handle/rxm_1", 3, 0, address, 1);
  writeHandle(root + "/listen_handle/tcp_max", 0 | reach, 9, address,
              core::wire::kMaxAddressLength);

  auto connect16 = core::wire::makeConnectMessage(5, 7, address, 16);
  writeFile(root + "/connect_message/tcp_16", &connect16, sizeof(connect16));
  // An rdma sender of four rails: the ring's key on each (wire version 4).
  const uint64_t ringRailKeys[core::wire::kMaxRails - 1] = {0x2222, 0x3333, 0x4444};
  auto connect96 = core::wire::makeConnectMessage(core::tags::kMaxCommId, 7, address,
                                                  core::wire::kMaxAddressLength, 2, 0x7f0000001000,
                                                  0x1111, ringRailKeys);
  writeFile(root + "/connect_message/max", &connect96, sizeof(connect96));

  auto accept = core::wire::makeAcceptMessage(11, 7);
  writeFile(root + "/accept_message/valid", &accept, sizeof(accept));
  // A receiver of four rails with EFA-sized (32-byte) addresses.
  uint8_t railAddress[3][32];
  for (int r = 0; r < 3; ++r) memset(railAddress[r], 0x40 + r, sizeof(railAddress[r]));
  const uint8_t* railAddresses[] = {railAddress[0], railAddress[1], railAddress[2]};
  auto fourRails =
      core::wire::makeAcceptMessage(11, 7, 2, core::wire::makeRailAddresses(4, railAddresses, 32));
  writeFile(root + "/accept_message/four_rails", &fourRails, sizeof(fourRails));
  // A sender of four rails: their addresses ride in its connect message (wire version 7).
  auto connectFour =
      core::wire::makeConnectMessage(12, 7, address, 32, 2, 0x7f0000001000, 0x1111, ringRailKeys,
                                     core::wire::makeRailAddresses(4, railAddresses, 32));
  writeFile(root + "/connect_message/four_rails", &connectFour, sizeof(connectFour));

  // Config: a control byte (0 bool, 1 int, 2 size, 3 whole environment) then the text.
  const char bools[] = "\0yes";
  writeFile(root + "/config/bool", bools, sizeof(bools) - 1);
  const char ints[] = "\001-12345";
  writeFile(root + "/config/int", ints, sizeof(ints) - 1);
  const char sizes[] = "\0024GiB";
  writeFile(root + "/config/size", sizes, sizeof(sizes) - 1);
  // Whole environments, one value per row of the table as it is now: the shipped defaults
  // written out, each row's low end and high end, and nothing set. All of them load.
  writeEnv(root + "/config/env_defaults", environment(Pick::kDefault));
  writeEnv(root + "/config/env_low", environment(Pick::kLow));
  writeEnv(root + "/config/env_high", environment(Pick::kHigh));
  writeEnv(root + "/config/env_unset", environment(Pick::kUnset));
  return 0;
}

}  // namespace
}  // namespace nnf::test

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  return nnf::test::run(argv[1]);
}
