// Questions to a provider that only an endpoint answers, asked before any device opens.
#pragma once

#include <rdma/fabric.h>

namespace nnf::fabric {

// Opens a fabric, domain and (unenabled) endpoint on `info` and reads the bool endpoint option
// `name` at `level`. Returns 0 and sets *value, or a negative libfabric error (-FI_ENOPROTOOPT:
// the provider does not know the option). Everything opened is closed again.
int probeEndpointBool(const fi_info* info, int level, int name, bool* value);

}  // namespace nnf::fabric
