// Writes the seed corpus (tests/fuzz/corpus/) from the real encoders, so that the fuzzers start
// from valid messages and mutate their way into the checks. Run by scripts/ci-fuzz.sh
// --refresh-seeds; the output is committed.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/wire.h"

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

// The listen-handle fuzzer reads a control byte first (provider choice, hash stamping).
void writeHandle(const std::string& path, uint8_t control, const core::wire::ListenHandle& h) {
  std::vector<uint8_t> bytes(1 + sizeof(h));
  bytes[0] = control;
  memcpy(bytes.data() + 1, &h, sizeof(h));
  writeFile(path, bytes.data(), bytes.size());
}

int run(const std::string& root) {
  // Address sizes as the providers produce them: shm names, a sockaddr_in, a sockaddr_in6.
  uint8_t address[core::wire::kMaxAddressLength];
  for (size_t i = 0; i < sizeof(address); ++i) address[i] = static_cast<uint8_t>(i * 7 + 1);
  for (const char* dir : {"listen_handle", "connect_message", "accept_message", "config"}) {
    mkdir((root + "/" + dir).c_str(), 0755);
  }
  writeHandle(root + "/listen_handle/tcp_16", 0,
              core::wire::makeListenHandle(3, "tcp", address, 16));
  writeHandle(root + "/listen_handle/shm_64", 1,
              core::wire::makeListenHandle(1, "shm", address, 64));
  writeHandle(root + "/listen_handle/efa_32", 2,
              core::wire::makeListenHandle(262143, "efa", address, 32));
  writeHandle(root + "/listen_handle/tcp_max", 0,
              core::wire::makeListenHandle(9, "tcp", address, core::wire::kMaxAddressLength));

  auto connect16 = core::wire::makeConnectMessage(5, 7, address, 16);
  writeFile(root + "/connect_message/tcp_16", &connect16, sizeof(connect16));
  auto connect96 =
      core::wire::makeConnectMessage(262143, 7, address, core::wire::kMaxAddressLength);
  writeFile(root + "/connect_message/max", &connect96, sizeof(connect96));

  auto accept = core::wire::makeAcceptMessage(11, 7);
  writeFile(root + "/accept_message/valid", &accept, sizeof(accept));

  // Config: a control byte (0 bool, 1 int, 2 size, 3 whole environment) then the text.
  const char bools[] = "\0yes";
  writeFile(root + "/config/bool", bools, sizeof(bools) - 1);
  const char ints[] = "\001-12345";
  writeFile(root + "/config/int", ints, sizeof(ints) - 1);
  const char sizes[] = "\0024GiB";
  writeFile(root + "/config/size", sizes, sizeof(sizes) - 1);
  // One value per parameter in table order, NUL-separated; \001 leaves one unset.
  const char env[] =
      "\003tcp\0sendrecv\0"
      "8\0"
      "64\0\001\0"
      "5\0"
      "1000\0on\0"
      "16\0"
      "1M\0\001\0auto\0"
      "read\0\001\0"
      "500\0"
      "30";
  writeFile(root + "/config/env", env, sizeof(env) - 1);
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
