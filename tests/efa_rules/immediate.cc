// EFA's immediate data is the device's 32-bit immediate (cq_data_size 4). The stand-in checks
// that callers keep to it, and makes the target's completion of a write with data look as EFA's
// does: EFA reports the bytes written (the device's byte_len), while tcp in libfabric 1.17
// reports 0. The bases carry 8 bytes of immediate data, so the initiator puts the write's length
// in the 4 bytes EFA's callers cannot use, and the target's CQ takes it back out.
#include <cstdio>

#include "efa_rules.h"

namespace efa_rules {
namespace {

constexpr int kLengthShift = 32;
constexpr uint64_t kImmediateMask = (uint64_t{1} << kLengthShift) - 1;
constexpr uint64_t kRemoteWriteFlags = FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE;

}  // namespace

std::string immediateTooWide(const char* op, uint64_t data) {
  if ((data & ~kImmediateMask) == 0) return "";
  char text[160];
  std::snprintf(text, sizeof(text),
                "%s immediate data 0x%llx has bits above EFA's cq_data_size of %zu bytes", op,
                static_cast<unsigned long long>(data), kEfaCqDataSize);
  return text;
}

uint64_t wireData(const Domain* domain, uint64_t data, size_t len) {
  if (!domain->lengthInData) return data;
  // EFA cuts writes at 1 GiB, so a length that does not fit in 32 bits never reaches a target
  // whole anyway; keep what fits, as the device's byte_len would.
  uint64_t length = len > kImmediateMask ? kImmediateMask : len;
  return (length << kLengthShift) | (data & kImmediateMask);
}

bool isRemoteWrite(uint64_t flags) {
  // What both bases report for a peer's write with data (tcp: RMA | REMOTE_WRITE too; shm in
  // libfabric 2.x: the data flag alone): data, and no receive of ours.
  return (flags & FI_REMOTE_CQ_DATA) != 0 && (flags & FI_RECV) == 0;
}

bool fixRemoteWrite(Cq* cq, fi_cq_tagged_entry* entry) {
  if (cq->domain != nullptr && cq->domain->lengthInData) {
    entry->len = entry->data >> kLengthShift;
    entry->data &= kImmediateMask;
  }
  // efa_rdm_cq_proc_ibv_recv_rdma_with_imm_completion: no context, no buffer, these flags.
  entry->op_context = nullptr;
  entry->flags = kRemoteWriteFlags;
  entry->buf = nullptr;
  entry->tag = 0;
  ++cq->remoteWrites;
  note(Evidence::kRemoteWrites);
  if (cq->remoteWriteErrors <= 0 || cq->remoteWrites % cq->remoteWriteErrors != 0) return false;
  // An unsolicited write receive that failed at the target: the error has no context of the
  // target's (none was posted) and says what it was by its immediate data.
  fi_cq_err_entry error{};
  error.op_context = nullptr;
  error.flags = kRemoteWriteFlags;
  error.len = entry->len;
  error.data = entry->data;
  error.err = FI_EIO;
  error.prov_errno = kRemoteWriteErrno;
  cq->synthetic.push_back(error);
  return true;
}

}  // namespace efa_rules
