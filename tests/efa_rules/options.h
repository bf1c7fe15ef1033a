// Endpoint option numbers, as libfabric 2.x defines them; headers that lack them (1.17) get
// our own definitions, headers that have them are checked against ours.
#pragma once

#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext.h>

namespace efa_rules {

constexpr int kOptCudaApiPermitted = 10;
constexpr int kOptSharedMemoryPermitted = 11;
constexpr int kOptEfaRnrRetry = -(0xefa << 16);
constexpr int kOptEfaEmulatedRead = kOptEfaRnrRetry + 1;
constexpr int kOptEfaEmulatedWrite = kOptEfaRnrRetry + 2;
constexpr int kOptEfaEmulatedAtomics = kOptEfaRnrRetry + 3;
constexpr int kOptEfaUseDeviceRdma = kOptEfaRnrRetry + 4;
constexpr int kOptEfaSendrecvInOrder128 = kOptEfaRnrRetry + 5;
constexpr int kOptEfaWriteInOrder128 = kOptEfaRnrRetry + 6;
// Ours, for tests: getopt returns the process's violation count (uint64_t).
constexpr int kOptEfaRulesViolations = kOptEfaRnrRetry + 0x100;
// Ours, for tests: getopt returns the -FI_EAGAIN answers this endpoint's posts got while waiting
// for a peer's handshake (uint64_t; handshake.cc).
constexpr int kOptEfaRulesHandshakeEagains = kOptEfaRnrRetry + 0x101;
// Ours, for tests: getopt returns the NICs whose link this process sees down (uint32_t mask), and
// the transmit operations failed so far because a link was down (uint64_t; link.cc).
constexpr int kOptEfaRulesLinkDown = kOptEfaRnrRetry + 0x102;
constexpr int kOptEfaRulesLinkFailed = kOptEfaRnrRetry + 0x103;
// Ours, for tests: the transmits a silent link withheld so far, and of those, the ones forgotten
// because their initiator removed the target's address (uint64_t each; link.cc).
constexpr int kOptEfaRulesLinkWithheld = kOptEfaRnrRetry + 0x104;
constexpr int kOptEfaRulesLinkForgotten = kOptEfaRnrRetry + 0x105;

static_assert(FI_OPT_EFA_RNR_RETRY == kOptEfaRnrRetry, "fi_ext.h disagrees");
#if NNF_EFA_RULES_HAVE_CUDA_API_PERMITTED
static_assert(FI_OPT_CUDA_API_PERMITTED == kOptCudaApiPermitted, "fi_endpoint.h disagrees");
static_assert(FI_OPT_SHARED_MEMORY_PERMITTED == kOptSharedMemoryPermitted,
              "fi_endpoint.h disagrees");
#endif
#if NNF_EFA_RULES_HAVE_EFA_IN_ORDER_OPTS
static_assert(FI_OPT_EFA_EMULATED_READ == kOptEfaEmulatedRead, "fi_ext.h disagrees");
static_assert(FI_OPT_EFA_EMULATED_WRITE == kOptEfaEmulatedWrite, "fi_ext.h disagrees");
static_assert(FI_OPT_EFA_EMULATED_ATOMICS == kOptEfaEmulatedAtomics, "fi_ext.h disagrees");
static_assert(FI_OPT_EFA_USE_DEVICE_RDMA == kOptEfaUseDeviceRdma, "fi_ext.h disagrees");
static_assert(FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES == kOptEfaSendrecvInOrder128,
              "fi_ext.h disagrees");
static_assert(FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES == kOptEfaWriteInOrder128,
              "fi_ext.h disagrees");
#endif

}  // namespace efa_rules
