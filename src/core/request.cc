#include "core/request.h"

namespace nnf::core {

RequestPool::RequestPool(DataComm* comm, size_t requests, size_t opsPerRequest)
    : requests_(requests), ops_(requests * opsPerRequest), sizes_(requests * opsPerRequest) {
  free_.reserve(requests);
  for (size_t i = 0; i < requests; ++i) {
    Request& request = requests_[i];
    request.comm = comm;
    request.ops = &ops_[i * opsPerRequest];
    request.sizes = &sizes_[i * opsPerRequest];
    for (size_t j = 0; j < opsPerRequest; ++j) {
      request.ops[j].request = &request;
      request.ops[j].index = static_cast<uint8_t>(j);
    }
  }
  // Hand out low addresses first: friendlier to caches and to reading traces.
  for (size_t i = requests; i > 0; --i) free_.push_back(&requests_[i - 1]);
}

}  // namespace nnf::core
