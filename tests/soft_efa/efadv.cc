// libefa.so.1: rdma-core's efadv functions, each handed to the device in libibverbs.so.1
// (which owns every object) through its private interface.
#include <errno.h>
#include <infiniband/efadv.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
ibv_cq_ex* nnf_soft_efa_create_cq(ibv_context*, ibv_cq_init_attr_ex*, efadv_cq_init_attr*,
                                  uint32_t);
ibv_qp* nnf_soft_efa_create_qp(ibv_context*, ibv_qp_init_attr_ex*, efadv_qp_init_attr*, uint32_t);
efadv_cq* nnf_soft_efa_dv_cq(ibv_cq_ex*);
int nnf_soft_efa_query_ah(ibv_ah*, efadv_ah_attr*, uint32_t);
int nnf_soft_efa_query_device(ibv_context*, efadv_device_attr*, uint32_t);
int nnf_soft_efa_query_mr(ibv_mr*, efadv_mr_attr*, uint32_t);
}

EXPORT int efadv_query_device(ibv_context* context, efadv_device_attr* attr, uint32_t inlen) {
  return nnf_soft_efa_query_device(context, attr, inlen);
}

EXPORT int efadv_query_ah(ibv_ah* ah, efadv_ah_attr* attr, uint32_t inlen) {
  return nnf_soft_efa_query_ah(ah, attr, inlen);
}

EXPORT int efadv_query_mr(ibv_mr* mr, efadv_mr_attr* attr, uint32_t inlen) {
  return nnf_soft_efa_query_mr(mr, attr, inlen);
}

EXPORT ibv_qp* efadv_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr,
                                  efadv_qp_init_attr* dv, uint32_t inlen) {
  return nnf_soft_efa_create_qp(context, attr, dv, inlen);
}

EXPORT ibv_qp* efadv_create_driver_qp(ibv_pd*, ibv_qp_init_attr*, uint32_t) {
  errno = EOPNOTSUPP;  // the pre-ex interface; libfabric 2.x uses efadv_create_qp_ex
  return nullptr;
}

EXPORT ibv_cq_ex* efadv_create_cq(ibv_context* context, ibv_cq_init_attr_ex* attr,
                                  efadv_cq_init_attr* dv, uint32_t inlen) {
  return nnf_soft_efa_create_cq(context, attr, dv, inlen);
}

EXPORT efadv_cq* efadv_cq_from_ibv_cq_ex(ibv_cq_ex* cq) {
  return nnf_soft_efa_dv_cq(cq);
}

// The header's inline version calls through the pointer; rdma-core exports one too, for callers
// built without it. (Another C++ name: the header's static inline one takes efadv_wc_read_sgid.)
extern "C" int softEfaReadSgid(efadv_cq* cq, ibv_gid* sgid) __asm__("efadv_wc_read_sgid");
EXPORT int softEfaReadSgid(efadv_cq* cq, ibv_gid* sgid) {
  return cq->wc_read_sgid(cq, sgid);
}
