// A main() for a libFuzzer target where there is no libFuzzer (a GCC build): every file of the
// given corpus directories once, then a fixed number of inputs made from them by seeded random
// mutation, the same on every run. A broken invariant aborts (fuzz_common.h) and fails the ctest
// that runs this; no coverage guidance, so this is a smoke test, not a substitute for fuzzing.
//
//   <target>_fuzz_smoke [--mutations=N] [--seed=S] CORPUS_DIR...
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace nnf::test {
namespace {

using Bytes = std::vector<uint8_t>;

// Every regular file under `dir`, in name order (directory order is not stable).
std::vector<Bytes> readCorpus(const std::string& dir) {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Bytes> inputs;
  for (const auto& path : paths) {
    std::ifstream file(path, std::ios::binary);
    inputs.emplace_back(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  return inputs;
}

// One random edit of the kinds that break length and range checks: bit flips, boundary values
// in 1, 2 or 4 bytes, inserted, removed or cut-off bytes.
void mutate(Bytes& bytes, std::mt19937_64& random) {
  static const uint32_t kBoundaries[] = {0,       1,          0x7f,       0x80,      0xff,
                                         0x100,   0x7fff,     0xffff,     0x10000,   0x3ffff,
                                         0x40000, 0x7fffffff, 0x80000000, 0xffffffff};
  auto at = [&](size_t width) { return random() % (bytes.size() - width + 1); };
  switch (random() % 6) {
    case 0:
      if (!bytes.empty()) bytes[at(1)] ^= static_cast<uint8_t>(1u << (random() % 8));
      break;
    case 1:
      if (!bytes.empty()) bytes[at(1)] = static_cast<uint8_t>(random());
      break;
    case 2: {
      const size_t width = size_t{1} << (random() % 3);
      if (bytes.size() < width) break;
      uint32_t value = kBoundaries[random() % std::size(kBoundaries)];
      if (random() % 2) value += static_cast<uint32_t>(random() % 3) - 1;  // just off it
      memcpy(bytes.data() + at(width), &value, width);  // little-endian: the low bytes
      break;
    }
    case 3:
      bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(at(0)), static_cast<uint8_t>(random()));
      break;
    case 4:
      if (!bytes.empty()) bytes.erase(bytes.begin() + static_cast<ptrdiff_t>(at(1)));
      break;
    default:
      bytes.resize(bytes.empty() ? 0 : random() % (bytes.size() + 1));
      break;
  }
}

void runOne(const Bytes& bytes) {
  // An exact-size heap copy, as libFuzzer passes it: a read past the end is a real overflow.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size()]);
  if (!bytes.empty()) memcpy(copy.get(), bytes.data(), bytes.size());
  LLVMFuzzerTestOneInput(copy.get(), bytes.size());
}

int run(int argc, char** argv) {
  long mutations = 20000;
  unsigned long seed = 1;
  std::vector<Bytes> corpus;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--mutations=", 12) == 0) {
      mutations = strtol(argv[i] + 12, nullptr, 10);
    } else if (strncmp(argv[i], "--seed=", 7) == 0) {
      seed = strtoul(argv[i] + 7, nullptr, 10);
    } else {
      std::vector<Bytes> more = readCorpus(argv[i]);
      corpus.insert(corpus.end(), more.begin(), more.end());
    }
  }
  if (corpus.empty()) {
    fprintf(stderr, "%s: no corpus files (give the corpus directory)\n", argv[0]);
    return 2;
  }
  for (const Bytes& input : corpus) runOne(input);
  std::mt19937_64 random(seed);
  for (long i = 0; i < mutations; ++i) {
    Bytes input = corpus[random() % corpus.size()];
    for (int edits = 1 + static_cast<int>(random() % 4); edits > 0; --edits) mutate(input, random);
    runOne(input);
  }
  printf("%zu corpus inputs and %ld mutations (seed %lu): every invariant held\n", corpus.size(),
         mutations, seed);
  return 0;
}

}  // namespace
}  // namespace nnf::test

int main(int argc, char** argv) {
  return nnf::test::run(argc, argv);
}
