// The memory-registration bits of libfabric's API before 1.5, by value. A provider written for
// that API may still report them (FI_MR_BASIC in domain_attr->mr_mode, FI_LOCAL_MR in the info's
// mode), so the plugin keeps reading them. libfabric 2.x marks both names deprecated with a
// `#pragma GCC warning` in the macro itself, which no -Wno- option silences and -Werror makes an
// error wherever the name is spelled; the values are part of the ABI and never change (fi_mr(3),
// fi_getinfo(3)).
#pragma once

#include <rdma/fabric.h>

#include <cstdint>

namespace nnf::fabric {

// FI_MR_BASIC: stands for FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY.
constexpr uint64_t kLegacyMrBasic = 1;
// FI_LOCAL_MR (mode bit): local buffers need descriptors, as FI_MR_LOCAL says today.
constexpr uint64_t kLegacyLocalMrMode = 1ULL << 55;

// Where the names are not deprecated yet (libfabric 1.x), the build checks the values.
#if FI_MAJOR_VERSION < 2
static_assert(kLegacyMrBasic == FI_MR_BASIC);
static_assert(kLegacyLocalMrMode == FI_LOCAL_MR);
#endif

}  // namespace nnf::fabric
