// Every version of NCCL's RMA plugin ABI we export (v13 to v15): what the ABI shims, the tools and
// the tests include.
#pragma once

#include "nccl_rma/rma_v13.h"
#include "nccl_rma/rma_v14.h"
#include "nccl_rma/rma_v15.h"
