// Finds the plugin's ncclRmaPlugin_v<N> table the way NCCL does (2.31: v15, then v14, then v13;
// 2.30: v14, then v13, with the GIN-era v13 taken only when getProperties reports the GIN proxy
// device type) and hands it out in v15's shape, as NCCL wraps an older RMA plugin in its newest
// interface. Shared by the tools and the tests.
#pragma once

#include <string>

#include "nccl_rma/rma.h"

namespace nnf::tools {

constexpr int kOldestRmaAbi = 13;
constexpr int kNewestRmaAbi = 15;

// NCCL's search orders: 2.31 knows v15; 2.30 stops at v14.
enum class RmaLookup { kNccl231, kNccl230 };

// `library` is a dlopen handle. `version` 0: the newest `lookup` finds; else exactly
// ncclRmaPlugin_v<version>. nullptr with *why set when none is found (or v13 would be refused
// by NCCL). *found gets the version. One adapted table per version and process.
const abi::RmaV15* findRma(void* library, int version, RmaLookup lookup, int* found,
                           std::string* why);

// "v14", "14" or "" (0: newest) from an environment variable (NNF_TEST_RMA_ABI); throws
// std::runtime_error naming the variable otherwise.
int rmaVersionFromEnv(const char* variable);

}  // namespace nnf::tools
