// One post to an endpoint as the rules see it: ep_msg.cc and ep_rma.cc describe each call so,
// ep_data.cc checks it (admit) and counts what the base took (tally).
#pragma once

#include <sys/uio.h>

#include "efa_rules.h"

namespace efa_rules {

enum class Kind { kMsg, kTagged, kRead, kWrite };

struct Post {
  Kind kind;
  bool recv = false;
  bool inject = false;
  const iovec* iov = nullptr;
  void* const* desc = nullptr;
  size_t count = 0;
  uint64_t tag = 0;
  uint64_t ignore = 0;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  void* context = nullptr;
  const char* op = "";
  const fi_rma_iov* rma = nullptr;  // RMA: the remote side, as the caller gave it
  size_t rmaCount = 0;
  bool withData = false;  // remote CQ data goes with it
  uint64_t data = 0;
};

inline Ep* epOf(fid_ep* ep) {
  return reinterpret_cast<Ep*>(ep);
}

// The flags of the completion a post makes at its initiator.
uint64_t completionFlags(const Post& post);
// Checks a post and fills the base descriptors; false with *ret set when the post must not be
// forwarded.
bool admit(Ep* ep, const Post& post, void** baseDesc, ssize_t* ret);
// Counts what a post the base took carries (sends, RMA writes and reads) for its domain.
ssize_t tally(Ep* ep, const Post& post, ssize_t ret);

fi_ops_msg* msgOps();
fi_ops_tagged* taggedOps();
fi_ops_rma* rmaOps();

}  // namespace efa_rules
