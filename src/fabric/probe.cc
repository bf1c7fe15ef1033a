#include "fabric/probe.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "fabric/fid.h"

namespace nnf::fabric {

int probeEndpointBool(const fi_info* info, int level, int name, bool* value) {
  InfoPtr copy(fi_dupinfo(info));
  if (!copy) return -FI_ENOMEM;
  Fid<fid_fabric> fabric;
  int ret = fi_fabric(copy->fabric_attr, fabric.out(), nullptr);
  if (ret != 0) return ret;
  Fid<fid_domain> domain;
  ret = fi_domain(fabric.get(), copy.get(), domain.out(), nullptr);
  if (ret != 0) return ret;
  Fid<fid_ep> endpoint;
  ret = fi_endpoint(domain.get(), copy.get(), endpoint.out(), nullptr);
  if (ret != 0) return ret;
  bool answer = false;
  size_t length = sizeof(answer);
  ret = fi_getopt(&endpoint->fid, level, name, &answer, &length);
  if (ret != 0) return ret;
  if (length != sizeof(answer)) return -FI_EINVAL;
  *value = answer;
  return 0;
}

}  // namespace nnf::fabric
