// Every version of NCCL's net plugin ABI we export (v6 to v12): what the ABI shims, the tools and
// the tests include.
#pragma once

#include "nccl_net/net_v10.h"
#include "nccl_net/net_v11.h"
#include "nccl_net/net_v12.h"
#include "nccl_net/net_v6.h"
#include "nccl_net/net_v7.h"
#include "nccl_net/net_v8.h"
#include "nccl_net/net_v9.h"
